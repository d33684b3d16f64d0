package cli

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/dustin/go-humanize"
)

// transfer shows a download's progress on stderr once it has lasted longer
// than quiet, so that a short one shows nothing: on a terminal one line
// redrawn in place, anywhere else one plain line every few seconds. A nil
// transfer shows nothing. With a unit it counts things (jobs submitted)
// instead of bytes.
type transfer struct {
	w     io.Writer
	tty   bool
	what  string
	unit  string
	quiet time.Duration // shown only after this long
	every time.Duration // at most one line per this long
	now   func() time.Time

	total, done  int64
	start, shown time.Time
}

func newTransfer(w io.Writer, what string) *transfer {
	t := &transfer{w: w, tty: isTerminal(w), what: what, quiet: time.Second, every: 5 * time.Second, now: time.Now}
	if t.tty {
		t.every = 250 * time.Millisecond
	}
	return t
}

// writer starts the count of a download of total bytes: what is written to
// it is counted as downloaded.
func (t *transfer) writer(total int64) io.Writer {
	if t == nil {
		return io.Discard
	}
	t.total, t.done, t.start = total, 0, t.now()
	return t
}

func (t *transfer) Write(p []byte) (int, error) {
	t.add(int64(len(p)))
	return len(p), nil
}

// count starts a count of total things and returns the function that
// counts n more of them done.
func (t *transfer) count(total int64) func(n int) {
	t.writer(total)
	return func(n int) { t.add(int64(n)) }
}

func (t *transfer) add(n int64) {
	t.done += n
	if now := t.now(); now.Sub(t.start) >= t.quiet && now.Sub(t.shown) >= t.every {
		t.show(now)
	}
}

func (t *transfer) show(now time.Time) {
	t.shown = now
	pct := 100
	if t.total > 0 {
		pct = int(t.done * 100 / t.total)
	}
	done, total := humanize.IBytes(uint64(t.done)), humanize.IBytes(uint64(t.total))
	if t.unit != "" {
		done, total = strconv.FormatInt(t.done, 10), strconv.FormatInt(t.total, 10)+" "+t.unit
	}
	line := fmt.Sprintf("%s: %s of %s (%d%%), %s", t.what, done, total, pct, now.Sub(t.start).Round(time.Second))
	if t.tty {
		fmt.Fprintf(t.w, "\r\033[K%s", line)
		return
	}
	fmt.Fprintln(t.w, line)
}

// interject has write print lines of its own (a job done, an error about
// one) where the count is shown: on a terminal the count's line is cleared
// first and drawn again below them.
func (t *transfer) interject(write func()) {
	if !t.tty || t.shown.IsZero() {
		write()
		return
	}
	fmt.Fprint(t.w, "\r\033[K")
	write()
	t.show(t.now())
}

// close shows where a download that was shown ended, and ends a terminal's
// line.
func (t *transfer) close() {
	if t == nil || t.shown.IsZero() {
		return
	}
	t.show(t.now())
	if t.tty {
		fmt.Fprintln(t.w)
	}
}
