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
	mu sync.Mutex
	// held maps each attempt announced to its entry in a beat's "held"
	// list, encoded once when it is claimed: a worker of many slots
	// beats often with hundreds of attempts, and encoding each one again
	// every beat would cost more than the rest of the beat.
	held map[*attempt][]byte
	// kick asks for a beat now: a claimed attempt is announced at once.
	kick chan struct{}
}

func newBeats() *beats {
	return &beats{held: map[*attempt][]byte{}, kick: make(chan struct{}, 1)}
}

// hold announces a from now on; the returned function stops announcing it.
func (b *beats) hold(a *attempt) (release func()) {
	entry, err := json.Marshal(queue.HeldAttempt{JobID: a.job.ID, Attempt: a.job.Attempt, Reply: a.msg.Reply()})
	if err != nil {
		// A HeldAttempt always encodes; were it not to, the attempt
		// would go unannounced and be recovered by its lease instead.
		return func() {}
	}
	b.mu.Lock()
	b.held[a] = entry
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

// beat encodes the announcement of the attempts held now: a queue.Beat,
// its sender first, so that a listener that needs only the sender stops
// reading before the attempts (queue.DecodeBeatSender).
func (b *beats) beat(w *Worker) ([]byte, error) {
	s := queue.BeatSender{Worker: w.cfg.WorkerID, Node: w.cfg.NodeID, Pool: w.cfg.Pool}
	s.PausedUntil, s.PauseReason = w.health.paused()
	sender, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.held) == 0 {
		return sender, nil
	}
	size := len(sender) + len(`,"held":[]`)
	for _, entry := range b.held {
		size += len(entry) + 1
	}
	out := make([]byte, 0, size)
	out = append(out, sender[:len(sender)-1]...)
	out = append(out, `,"held":[`...)
	first := true
	for _, entry := range b.held {
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, entry...)
	}
	return append(out, "]}"...), nil
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
		w.sendBeat()
	}
}

// sendBeat publishes one beat announcing the attempts held now.
func (w *Worker) sendBeat() {
	if w.nc == nil {
		return
	}
	body, err := w.beats.beat(w)
	if err != nil {
		return
	}
	if err := w.nc.Publish(queue.AliveSubject(w.cfg.Pool), body); err != nil {
		w.cfg.Logger.Warn("publishing a liveness beat", "err", err)
	}
}
