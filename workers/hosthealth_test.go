package workers

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpuq/gpuq/queue"
)

func TestHostErrorsInARowPauseTheWorkerForLongerWhileTheyGoOn(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	h := newHostHealth()
	h.now = func() time.Time { return now }
	fail := func(n int) time.Duration {
		t.Helper()
		var d time.Duration
		for i := range n {
			if d = h.failed(fmt.Sprintf("preparing directories: error %d", i+1)); d != 0 && i < n-1 {
				t.Fatalf("host error %d of %d already paused the worker (%s)", i+1, n, d)
			}
		}
		return d
	}
	if d := fail(hostErrorsBeforePause - 1); d != 0 || h.pause() != 0 {
		t.Fatalf("%d host errors paused the worker for %s", hostErrorsBeforePause-1, h.pause())
	}
	// A job that starts shows the machine works: the count starts again.
	h.started()
	if d := fail(hostErrorsBeforePause - 1); d != 0 {
		t.Fatalf("the count did not start again after a job started: paused %s", d)
	}
	if until, _ := h.paused(); until != nil {
		t.Fatalf("a worker not paused says it is paused until %s", until)
	}
	if d := fail(1); d != hostPauseFirst || h.pause() != hostPauseFirst {
		t.Fatalf("host errors in a row: paused %s (%s left), want %s", d, h.pause(), hostPauseFirst)
	}
	// Its beats say until when, and the host error that paused it.
	if until, reason := h.paused(); until == nil || !until.Equal(now.Add(hostPauseFirst)) || reason != "preparing directories: error 1" {
		t.Fatalf("paused: until %v, reason %q; want %s and the last host error", until, reason, now.Add(hostPauseFirst))
	}
	now = now.Add(10 * time.Second)
	if got, want := h.pause(), hostPauseFirst-10*time.Second; got != want {
		t.Fatalf("10s into the pause: %s left, want %s", got, want)
	}
	now = now.Add(time.Hour)
	if h.pause() != 0 {
		t.Fatalf("a pause over: %s left", h.pause())
	}
	if until, reason := h.paused(); until != nil || reason != "" {
		t.Fatalf("a pause over: paused until %s (%q)", until, reason)
	}
	for _, want := range []time.Duration{2 * hostPauseFirst, 4 * hostPauseFirst, 8 * hostPauseFirst, 16 * hostPauseFirst, hostPauseMax, hostPauseMax} {
		if d := fail(hostErrorsBeforePause); d != min(want, hostPauseMax) {
			t.Fatalf("host errors going on: paused %s, want %s", d, min(want, hostPauseMax))
		}
	}
	h.started()
	if d := fail(hostErrorsBeforePause); d != hostPauseFirst {
		t.Fatalf("after a job started, the next pause: %s, want %s again", d, hostPauseFirst)
	}
}

func TestAPausedWorkersReasonIsBoundedAtACharactersStart(t *testing.T) {
	t.Parallel()
	h := newHostHealth()
	long := "restoring: " + strings.Repeat("é", queue.MaxPauseReason)
	for range hostErrorsBeforePause {
		h.failed(long)
	}
	_, reason := h.paused()
	if len(reason) > queue.MaxPauseReason || !utf8.ValidString(reason) || !strings.HasSuffix(reason, "…") || !strings.HasPrefix(long, strings.TrimSuffix(reason, "…")) {
		t.Fatalf("a %d-byte host error named as %d bytes: %q", len(long), len(reason), reason)
	}
}
