package workers

import (
	"context"
	"errors"
	"time"
)

// Preemption is the cause a worker's context is cancelled with when its
// provider announced that the machine goes away. errors.Is reports it as
// ErrPreempted, so it takes the same "final checkpoint, record, hand back"
// path as SIGTERM, carrying the provider's reason and deadline.
type Preemption struct {
	// Reason in the provider's terms; recorded as the attempt's reason.
	Reason string
	// Deadline is when the provider takes the machine; zero when unknown.
	Deadline time.Time
}

func (p *Preemption) Error() string { return "preempted: " + p.Reason }

// Is makes a Preemption match ErrPreempted.
func (p *Preemption) Is(target error) bool { return target == ErrPreempted }

// preemptionOf is the preemption cause carries; a bare ErrPreempted (a
// shutdown) has a generic reason and no deadline.
func preemptionOf(cause error) Preemption {
	var p *Preemption
	if errors.As(cause, &p) {
		return *p
	}
	return Preemption{Reason: "handed back after the notice"}
}

// graceFor is how long a job gets after SIGTERM: Grace, cut short so that
// the job's exit and the hand-back fit before the provider's deadline with
// NoticeReserve to spare.
func (w *Worker) graceFor(p Preemption) time.Duration {
	grace := w.cfg.Grace
	if p.Deadline.IsZero() {
		return grace
	}
	left := time.Until(p.Deadline) - w.cfg.NoticeReserve
	if left < grace {
		grace = max(left, minGrace)
	}
	return grace
}

// minGrace is the least a job gets after SIGTERM, even past a deadline:
// its final checkpoint may still beat the provider.
const minGrace = 500 * time.Millisecond

// Warn records an early warning (an AWS rebalance recommendation, a live
// migration) on the trail of every job running here, so that the control
// plane hears of it; nothing is handed back.
func (w *Worker) Warn(ctx context.Context, reason string) {
	w.runningMu.Lock()
	attempts := make([]*attempt, 0, len(w.running))
	for a := range w.running {
		attempts = append(attempts, a)
	}
	w.runningMu.Unlock()
	for _, a := range attempts {
		if err := w.store.RecordNotice(ctx, a.job.ID, a.job.Attempt, "early warning: "+reason, w.cfg.AckWait); err != nil {
			a.log.Warn("recording an early warning", "err", err)
		}
	}
}

// track adds a (on) or removes it from the running attempts.
func (w *Worker) track(a *attempt, on bool) {
	w.runningMu.Lock()
	defer w.runningMu.Unlock()
	if w.running == nil {
		w.running = map[*attempt]struct{}{}
	}
	if on {
		w.running[a] = struct{}{}
	} else {
		delete(w.running, a)
	}
}
