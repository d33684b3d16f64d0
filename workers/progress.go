package workers

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"
)

// A step moving an archive for a job (restoring its checkpoint, fetching
// its working directory or the outputs it reads, uploading a checkpoint or
// its outputs) may take minutes for large archives. While one lasts, the
// job's log says how far it has come, a line every Config.Progress, and
// where it ended, so that `gpuq logs -f` shows why a job has printed
// nothing for minutes. A step shorter than Config.Progress says nothing.

// defaultProgress is Config.Progress' default.
const defaultProgress = 10 * time.Second

// stepProgress counts the bytes of one step and reports them in the job's
// log while the step lasts.
type stepProgress struct {
	say   func(format string, args ...any)
	what  string
	total int64
	start time.Time
	done  atomic.Int64
	stop  chan struct{}
	ended chan struct{}
	shown bool
}

// progress starts reporting the step what, of total bytes (0: unknown),
// every Config.Progress until end is called: on out, the job's stderr log
// while its command runs, else (nil) before or after it, through prepLine.
func (a *attempt) progress(what string, total int64, out io.Writer) *stepProgress {
	say := a.prepLine
	if out != nil {
		say = func(format string, args ...any) { fmt.Fprintf(out, "gpuq: "+format+"\n", args...) }
	}
	p := &stepProgress{say: say, what: what, total: total, start: time.Now(), stop: make(chan struct{}), ended: make(chan struct{})}
	every := a.w.cfg.Progress
	if every <= 0 {
		every = defaultProgress
	}
	go p.loop(every)
	return p
}

func (p *stepProgress) loop(every time.Duration) {
	defer close(p.ended)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.shown = true
			p.say("%s: %s, %s", p.what, p.sofar(), time.Since(p.start).Round(time.Second))
		}
	}
}

// sofar is the bytes counted so far, of the total when it is known.
func (p *stepProgress) sofar() string {
	done := p.done.Load()
	if p.total <= 0 {
		return humanize.IBytes(uint64(done))
	}
	return fmt.Sprintf("%s of %s (%d%%)", humanize.IBytes(uint64(done)), humanize.IBytes(uint64(p.total)), min(done*100/p.total, 100))
}

// end stops the reports; a step that was reported says how it ended.
func (p *stepProgress) end(err error) {
	close(p.stop)
	<-p.ended
	if !p.shown {
		return
	}
	took := time.Since(p.start).Round(time.Second)
	if err != nil {
		p.say("%s: failed after %s, %s", p.what, humanize.IBytes(uint64(p.done.Load())), took)
		return
	}
	p.say("%s: done, %s in %s", p.what, humanize.IBytes(uint64(p.done.Load())), took)
}

// counted is an archive store whose reads p counts.
type counted struct {
	ArchiveStore
	p *stepProgress
}

func (c counted) Get(ctx context.Context, uri string, w io.Writer) error {
	return c.ArchiveStore.Get(ctx, uri, progressWriter{w: w, n: &c.p.done})
}

// progressReader counts what is read from r on n, which another goroutine
// reads.
type progressReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c progressReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// progressWriter counts what it writes on n, which another goroutine reads.
type progressWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c progressWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// prepLine writes a line to the job's stderr log before its command starts
// or after it ended, through a shipper of its own that closePrep ends.
func (a *attempt) prepLine(format string, args ...any) {
	a.prepMu.Lock()
	defer a.prepMu.Unlock()
	if a.prepLogs == nil {
		a.prepLogs = newLogShipper(a.w.js, a.w.cfg.Pool, a.job.ID, a.job.Attempt)
		a.prepOut = a.prepLogs.writer("stderr")
	}
	fmt.Fprintf(a.prepOut, "gpuq: "+format+"\n", args...)
}

// closePrep publishes what prepLine wrote, before the command's own output.
func (a *attempt) closePrep() {
	a.prepMu.Lock()
	defer a.prepMu.Unlock()
	if a.prepLogs != nil {
		a.prepLogs.close()
		a.prepLogs, a.prepOut = nil, nil
	}
}
