package workers

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/gpuq/gpuq/queue"
)

// pullExpiry bounds how long a pull request waits on the server. A paused
// worker keeps its connection, and with it the pulls it left waiting; a
// message the control plane naks on its behalf must go to another worker, so
// every pull expires well before the worker can be declared lost.
const pullExpiry = 360 * time.Millisecond

// stallAfter is the gap between two beats after which a worker assumes it
// may have been declared lost (it was paused, or starved of CPU) and checks
// every held attempt's lease at once, so that a fenced attempt's job stops
// before it runs on beside its successor.
const stallAfter = 2 * queue.BeatInterval

// kickGap is the least time between two beats when claims ask for one: the
// attempts of a burst of claims go in one beat, not one beat each, and an
// attempt is announced at most kickGap after its claim.
const kickGap = 20 * time.Millisecond

// beats is the set of attempts a worker announces in its liveness beats.
type beats struct {
	mu   sync.Mutex
	held map[*attempt]struct{}
	// kick asks for a beat now: a claimed attempt is announced at once.
	kick chan struct{}
}

func newBeats() *beats {
	return &beats{held: map[*attempt]struct{}{}, kick: make(chan struct{}, 1)}
}

// hold announces a from now on; the returned function stops announcing it.
func (b *beats) hold(a *attempt) (release func()) {
	b.mu.Lock()
	b.held[a] = struct{}{}
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
	return func() {
		b.mu.Lock()
		delete(b.held, a)
		b.mu.Unlock()
	}
}

// beat is the announcement of the attempts held now.
func (b *beats) beat(w *Worker) queue.Beat {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := queue.Beat{BeatSender: queue.BeatSender{Worker: w.cfg.WorkerID, Node: w.cfg.NodeID, Pool: w.cfg.Pool}, Held: make([]queue.HeldAttempt, 0, len(b.held))}
	for a := range b.held {
		out.Held = append(out.Held, queue.HeldAttempt{JobID: a.job.ID, Attempt: a.job.Attempt, Reply: a.msg.Reply()})
	}
	return out
}

// recheckAll asks every held attempt to check its lease now.
func (b *beats) recheckAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for a := range b.held {
		select {
		case a.recheck <- struct{}{}:
		default:
		}
	}
}

// announce publishes the worker's beats on its pool's alive subject until
// ctx ends.
func (w *Worker) announce(ctx context.Context) {
	if w.nc == nil {
		return
	}
	t := time.NewTicker(queue.BeatInterval)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.beats.kick:
			if wait := kickGap - time.Since(last); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		}
		if now := time.Now(); now.Sub(last) > stallAfter {
			w.cfg.Logger.Warn("liveness beats stalled; checking every held attempt's lease", "gap", now.Sub(last).Round(time.Millisecond))
			w.beats.recheckAll()
		}
		last = time.Now()
		body, err := json.Marshal(w.beats.beat(w))
		if err != nil {
			continue
		}
		if err := w.nc.Publish(queue.AliveSubject(w.cfg.Pool), body); err != nil {
			w.cfg.Logger.Warn("publishing a liveness beat", "err", err)
		}
	}
}
