package cli

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
)

// fakeTerminal is a writer that says it is a terminal.
type fakeTerminal struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (f *fakeTerminal) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.buf.Write(p)
}

func (f *fakeTerminal) IsTerminal() bool { return true }

func (f *fakeTerminal) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.buf.String()
}

func TestWaitProgressOnAPipeIsOneLinePerStateChange(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	id := uuid.New()
	p := newProgress(&out, id)
	p.event(queue.Event{State: queue.StatePlaced, Message: "placed on local-cpu"})
	p.event(queue.Event{State: queue.StateRunning, Attempt: 1, Message: "claimed"})
	p.event(queue.Event{State: queue.StateRunning, Attempt: 1, Message: "claimed"})
	// A message from elsewhere (a provider's notice reason) is shown
	// with its control characters escaped.
	p.event(queue.Event{State: queue.StateRunning, Attempt: 2, Message: "claimed\x1b[2J again"})
	p.event(queue.Event{State: queue.StateSucceeded, Attempt: 2})
	p.close()
	got := out.String()
	if strings.ContainsAny(got, "\r\033") || !strings.Contains(got, `claimed\x1b[2J again`) {
		t.Fatalf("a pipe must get no control characters: %q", got)
	}
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("want one line per state change (4), got %d:\n%s", len(lines), got)
	}
	for i, want := range []string{"placed attempt 0", "running attempt 1", "running attempt 2", "succeeded attempt 2"} {
		if !strings.HasPrefix(lines[i], id.String()+" "+want) {
			t.Errorf("line %d: want %q after the id, got %q", i, want, lines[i])
		}
	}
}

func TestASweepsProgressCountsItsElapsedTimeFromTheStartOfTheWait(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	id := uuid.New()
	// The third job of a sweep, reached 7 s into the wait: it finished
	// while the jobs before it were waited for.
	p := newSweepProgress(&out, id, "2 of 3 finished · ", time.Now().Add(-7*time.Second))
	p.event(queue.Event{State: queue.StateSucceeded, Attempt: 1, Message: "succeeded"})
	p.close()
	if want := id.String() + " succeeded attempt 1 7s succeeded\n"; out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
}

func TestWaitProgressOnATerminalRedrawsOneLineWithElapsedTimeTicking(t *testing.T) {
	t.Parallel()
	term := &fakeTerminal{}
	id := uuid.Must(uuid.NewV7())
	p := newProgress(term, id)
	p.event(queue.Event{State: queue.StateRunning, Attempt: 1, Message: "claimed"})
	// No state change for over two ticks: the line is redrawn with the
	// elapsed time moving on.
	time.Sleep(2*tickEvery + 300*time.Millisecond)
	p.close()
	got := term.String()
	if !strings.HasPrefix(got, "\r\033[K") || !strings.HasSuffix(got, "\n") {
		t.Fatalf("a terminal gets one redrawn line ended by a newline: %q", got)
	}
	draws := strings.Split(strings.TrimPrefix(strings.TrimSuffix(got, "\n"), "\r\033[K"), "\r\033[K")
	if len(draws) < 3 {
		t.Fatalf("want the line redrawn every %s while nothing changes, got %d draws: %q", tickEvery, len(draws), got)
	}
	if !strings.Contains(draws[0], " 0s ") || !strings.Contains(draws[len(draws)-1], " 2s ") {
		t.Fatalf("the elapsed time must tick from 0s to 2s: first %q, last %q", draws[0], draws[len(draws)-1])
	}
	if strings.Contains(got, "\n\r") || strings.Count(got, "\n") != 1 {
		t.Fatalf("a terminal's progress is one line: %q", got)
	}
	// The line names the job by the end of its id: a UUIDv7 begins with
	// the time, the same for every job of a sweep.
	if want := "…" + id.String()[24:] + "  running "; !strings.HasPrefix(draws[0], want) {
		t.Fatalf("want the line to start %q, got %q", want, draws[0])
	}
}
