package workers

import (
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gpuq/gpuq/queue"
)

// hostErrorsBeforePause is how many host errors in a row, with no job
// started between them, make a worker take no work for a while.
const hostErrorsBeforePause = 3

// The first pause, and the most it doubles to while the errors go on.
const (
	hostPauseFirst = 30 * time.Second
	hostPauseMax   = 10 * time.Minute
)

// hostHealth keeps a worker whose own machine keeps failing jobs around
// their runs (a full disk, an unreachable store) from taking its pool's
// jobs one after the other: each would be handed back as a host error,
// counting against its retries.max_preemptions, and a broken worker is
// the first to be free for the next. After hostErrorsBeforePause host
// errors in a row it takes no work for hostPauseFirst, doubling up to
// hostPauseMax while the errors go on; a job that starts resets it.
type hostHealth struct {
	now func() time.Time

	mu     sync.Mutex
	inARow int
	pauses int
	until  time.Time
	// last is the latest host error, which the worker's beats name while
	// it pauses.
	last string
}

func newHostHealth() *hostHealth { return &hostHealth{now: time.Now} }

// failed counts a host error and returns the pause it starts, or 0.
func (h *hostHealth) failed(reason string) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = clip(reason, queue.MaxPauseReason)
	h.inARow++
	if h.inARow < hostErrorsBeforePause {
		return 0
	}
	h.inARow = 0
	d := hostPauseFirst
	for range h.pauses {
		if d >= hostPauseMax {
			break
		}
		d *= 2
	}
	d = min(d, hostPauseMax)
	h.pauses++
	h.until = h.now().Add(d)
	return d
}

// started records a job whose process started: the machine works.
func (h *hostHealth) started() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inARow, h.pauses = 0, 0
}

// pause returns how much longer the worker should take no work.
func (h *hostHealth) pause() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return max(0, h.until.Sub(h.now()))
}

// paused returns until when the worker takes no work and the host error
// that paused it, or nil while it takes work.
func (h *hostHealth) paused() (*time.Time, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.until.After(h.now()) {
		return nil, ""
	}
	until := h.until
	return &until, h.last
}

// clip cuts s to at most n bytes, at a character's start, marking the cut
// with an ellipsis.
func clip(s string, n int) string {
	const more = "…"
	if len(s) <= n {
		return s
	}
	cut := n - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}
