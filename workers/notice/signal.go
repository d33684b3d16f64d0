package notice

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gpuq/gpuq/adapters"
)

// signalWatcher turns the container runtime's SIGTERM into a notice whose
// deadline is the provider's grace period.
type signalWatcher struct{ cfg Config }

func (w *signalWatcher) Watch(ctx context.Context) (*Notice, error) {
	sigs := w.cfg.Signals
	if sigs == nil {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		defer signal.Stop(ch)
		sigs = ch
	}
	select {
	case sig := <-sigs:
		now := time.Now()
		name := sig.String()
		if sig == syscall.SIGTERM {
			name = "SIGTERM"
		}
		n := &Notice{Received: now, Notice: adapters.Notice{Kind: adapters.NoticePreempt, Source: SIGTERM, Reason: name + " received"}}
		if w.cfg.Grace > 0 {
			n.Deadline = now.Add(w.cfg.Grace)
			n.Reason += fmt.Sprintf("; SIGKILL follows after %s", w.cfg.Grace)
		}
		return n, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
