package control

import (
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/queue"
)

// BeatConn is the part of a NATS connection the autoscaler hears workers'
// liveness beats on.
type BeatConn interface {
	Subscribe(subject string, cb nats.MsgHandler) (*nats.Subscription, error)
	Status() nats.Status
}

// beatListenFor is how long the autoscaler must have heard beats, connected
// throughout, before it takes a booting instance's silence to mean that its
// worker never came up: a server that just took the lead, or got its
// connection back, has not yet heard workers that beat every
// queue.BeatInterval.
const beatListenFor = 10 * queue.BeatInterval

// beatListener remembers, per node and pool, when a worker there last beat.
// A launched worker's node is its instance's id (the boot spec's
// --instance-id), so a beat is the instance's first sign of a worker before
// it claims anything.
type beatListener struct {
	sub *nats.Subscription

	mu sync.Mutex
	// since is when the listener last started hearing with its connection
	// up; zero while it is down.
	since time.Time
	heard map[heardFrom]heardBeat
	// booting are the instances the last pass found pending; the first
	// beat of one's worker is sent on wake (when not nil and not full).
	booting map[string]bool
	wake    chan<- struct{}
}

// heardFrom is where a beat came from: a node and its worker's pool.
type heardFrom struct{ node, pool string }

// heardBeat is the latest beat heard from a node's worker of a pool: when,
// and whether it said the worker takes no work after host errors in a row,
// naming the last of them.
type heardBeat struct {
	at     time.Time
	paused bool
	reason string
}

// listen subscribes to every pool's beats; now stamps each one, and the
// first beat from a booting instance is signalled on wake.
func listen(conn BeatConn, now func() time.Time, wake chan<- struct{}, logger *slog.Logger) (*beatListener, error) {
	l := &beatListener{heard: map[heardFrom]heardBeat{}, booting: map[string]bool{}, wake: wake}
	sub, err := conn.Subscribe(queue.AliveSubjectAll, func(m *nats.Msg) {
		b, err := readBeatSender(m)
		if err != nil {
			logger.Debug("autoscaler: ignoring a worker beat", "subject", m.Subject, "err", err)
			return
		}
		if b.Node == "" {
			return
		}
		at := now()
		l.mu.Lock()
		defer l.mu.Unlock()
		l.heard[heardFrom{b.Node, b.Pool}] = heardBeat{at: at, paused: b.PausedUntil != nil, reason: b.PauseReason}
		if l.booting[b.Node] {
			delete(l.booting, b.Node)
			select {
			case l.wake <- struct{}{}:
			default: // a pass is due already (or nobody runs passes)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribing to worker beats: %w", err)
	}
	l.mu.Lock()
	l.sub, l.since = sub, now()
	l.mu.Unlock()
	return l, nil
}

// pass readies the listener for one autoscaler pass over the live
// instances: it forgets nodes that are not among them, notes those still
// booting, and restarts its listening time when the connection is not up.
// It returns the beats heard so far, as they stand now, and whether it has
// listened long enough for a booting instance's silence to count.
func (l *beatListener) pass(conn BeatConn, now time.Time, live, booting map[string]bool) (heard map[heardFrom]heardBeat, long bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.booting = booting
	for from := range l.heard {
		if !live[from.node] {
			delete(l.heard, from)
		}
	}
	heard = maps.Clone(l.heard)
	if conn.Status() != nats.CONNECTED {
		l.since = time.Time{}
		return heard, false
	}
	if l.since.IsZero() {
		l.since = now
	}
	return heard, now.Sub(l.since) >= beatListenFor
}

// expect notes an instance about to boot, until the next pass.
func (l *beatListener) expect(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.booting[id] = true
}

func (l *beatListener) stop() {
	l.sub.Unsubscribe() //nolint:errcheck // the connection may be closing
}
