package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/term"

	"github.com/gpuq/gpuq/queue"
)

// progress shows a job's state changes while a command waits for it. On a
// terminal it redraws one line in place and keeps its elapsed time ticking;
// anywhere else (a pipe, a file, a notebook capturing output) it writes one
// plain line per state change, so captured output holds no control codes.
type progress struct {
	w     io.Writer
	tty   bool
	id    uuid.UUID
	start time.Time
	// sweep, on a terminal, comes before the job on its line (a wait for
	// several jobs: how many finished), and the line is erased rather
	// than ended when the job finishes, so that one line shows the sweep.
	sweep string

	mu    sync.Mutex
	last  *queue.Event
	drawn bool
	stop  chan struct{}
	done  chan struct{}
}

// isTerminal reports whether w is a terminal. A writer may say so itself
// (IsTerminal), which lets tests stand in for one.
func isTerminal(w io.Writer) bool {
	switch t := w.(type) {
	case interface{ IsTerminal() bool }:
		return t.IsTerminal()
	case *os.File:
		return term.IsTerminal(int(t.Fd()))
	}
	return false
}

// tickEvery is how often a terminal's progress line is redrawn.
const tickEvery = time.Second

func newProgress(w io.Writer, id uuid.UUID) *progress {
	return newSweepProgress(w, id, "", time.Now())
}

// newSweepProgress is newProgress for one job of several, waited for in
// turn: on a terminal sweep leads the job's line, which is erased once the
// job finishes. Its elapsed time counts from start, when the wait for the
// whole sweep began, so that a job that finished while an earlier one was
// waited for shows when the wait saw it rather than 0s.
func newSweepProgress(w io.Writer, id uuid.UUID, sweep string, start time.Time) *progress {
	p := &progress{w: w, tty: isTerminal(w), id: id, start: start, sweep: sweep}
	if p.tty {
		p.stop, p.done = make(chan struct{}), make(chan struct{})
		go p.tick()
	}
	return p
}

func (p *progress) tick() {
	defer close(p.done)
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			if p.last != nil {
				p.draw()
			}
			p.mu.Unlock()
		}
	}
}

// event shows a state change; a repeat of the last state and attempt is
// shown only on a terminal, where it refreshes the line.
func (p *progress) event(ev queue.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	repeat := p.last != nil && p.last.State == ev.State && p.last.Attempt == ev.Attempt
	p.last = &ev
	if p.tty {
		p.draw()
		return
	}
	if !repeat {
		fmt.Fprintf(p.w, "%s %s attempt %d %s %s\n", p.id, ev.State, ev.Attempt, p.elapsed(), printable(ev.Message))
	}
}

func (p *progress) elapsed() time.Duration { return time.Since(p.start).Round(time.Second) }

// draw rewrites the terminal's line; p.mu is held.
func (p *progress) draw() {
	p.drawn = true
	fmt.Fprintf(p.w, "\r\033[K%s%s  %-9s attempt %d  %s  %s", p.sweep, shortID(p.id), p.last.State, p.last.Attempt, p.elapsed(), printable(truncate(p.last.Message, 60)))
}

// close stops the ticking and ends a drawn line (erases it, for a job of
// a sweep).
func (p *progress) close() {
	if p.tty {
		close(p.stop)
		<-p.done
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.drawn && p.sweep != "":
		fmt.Fprint(p.w, "\r\033[K")
	case p.drawn:
		fmt.Fprintln(p.w)
	}
}

// shortID names a job in a line of limited width by its id's last 12 hex
// digits: job ids are UUIDv7, whose leading digits are the time of
// submission, the same for every job of a sweep.
func shortID(id uuid.UUID) string {
	s := id.String()
	return "…" + s[len(s)-12:]
}
