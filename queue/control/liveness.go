package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/queue"
)

// LivenessStore is what the liveness monitor needs from the system of record.
type LivenessStore interface {
	FenceLost(ctx context.Context, pool, worker string, refs []queue.AttemptRef, reason string) ([]queue.AttemptRef, error)
}

// LivenessConn is the part of a NATS connection the liveness monitor uses:
// it hears the beats and naks run messages through their reply subjects.
type LivenessConn interface {
	Subscribe(subject string, cb nats.MsgHandler) (*nats.Subscription, error)
	Publish(subject string, data []byte) error
	Status() nats.Status
}

// Liveness watches the workers' beats and hands back the jobs of a worker
// that has gone silent: it fences the attempts the worker held (the store
// write after which every write of those attempts fails, so a worker that was
// only paused or partitioned is fenced out when it comes back) and naks their
// run messages, so that another worker of the pool takes each job over at
// once rather than after the consumer's AckWait. Every replica of the control
// plane hears every beat; the store write lets only one of them hand each
// attempt back.
type Liveness struct {
	NATS  LivenessConn
	Store LivenessStore
	// LostAfter is how long a worker may stay silent before it is declared
	// lost. It must leave room for a few beats (queue.BeatInterval).
	// Default 700ms.
	LostAfter time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns l with every unset default filled in.
func (l Liveness) WithDefaults() Liveness {
	if l.LostAfter == 0 {
		l.LostAfter = 700 * time.Millisecond
	}
	if l.Logger == nil {
		l.Logger = slog.Default()
	}
	return l
}

func (l Liveness) validate() error {
	switch {
	case l.NATS == nil:
		return errors.New("liveness.nats: must be set")
	case l.Store == nil:
		return errors.New("liveness.store: must be set")
	case l.LostAfter < 3*queue.BeatInterval:
		return fmt.Errorf("liveness.lost_after: must be at least %s (three beats), got %s", 3*queue.BeatInterval, l.LostAfter)
	}
	return nil
}

// seenWorker is what the monitor knows of one worker.
type seenWorker struct {
	pool, worker string
	last         time.Time
	held         []queue.HeldAttempt
}

// Run watches beats until ctx ends.
func (l *Liveness) Run(ctx context.Context) error {
	cfg := l.WithDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	var mu sync.Mutex
	seen := map[string]*seenWorker{}
	sub, err := cfg.NATS.Subscribe(queue.AliveSubjectAll, func(m *nats.Msg) {
		at := time.Now()
		b, err := readBeat(m)
		if err != nil {
			cfg.Logger.Warn("ignoring a worker beat", "subject", m.Subject, "err", err)
			return
		}
		key := b.Pool + "\x00" + b.Worker
		mu.Lock()
		defer mu.Unlock()
		w := seen[key]
		if w == nil {
			w = &seenWorker{pool: b.Pool, worker: b.Worker}
			seen[key] = w
		}
		w.last, w.held = at, b.Held
	})
	if err != nil {
		return fmt.Errorf("subscribing to worker beats: %w", err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // the connection may be closing
	tick := time.NewTicker(queue.BeatInterval / 2)
	defer tick.Stop()
	prev := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		now := time.Now()
		// Silence heard while this process was not running (a pause of its
		// own, a lost NATS connection) says nothing of the workers: restart
		// every worker's clock instead of fencing them all.
		blind := now.Sub(prev) > cfg.LostAfter/2 || cfg.NATS.Status() != nats.CONNECTED
		prev = now
		var lost []*seenWorker
		mu.Lock()
		for key, w := range seen {
			switch {
			case blind:
				w.last = now
			case now.Sub(w.last) > cfg.LostAfter:
				lost = append(lost, w)
				delete(seen, key)
			}
		}
		mu.Unlock()
		for _, w := range lost {
			cfg.handBack(ctx, w, now.Sub(w.last))
		}
	}
}

// handBack fences the attempts a lost worker held and naks their messages.
func (l *Liveness) handBack(ctx context.Context, w *seenWorker, silent time.Duration) {
	if len(w.held) == 0 {
		l.Logger.Info("worker gone quiet holding no job", "pool", w.pool, "worker", w.worker)
		return
	}
	refs := make([]queue.AttemptRef, len(w.held))
	replies := make(map[queue.AttemptRef]string, len(w.held))
	for i, h := range w.held {
		refs[i] = queue.AttemptRef{JobID: h.JobID, Attempt: h.Attempt}
		replies[refs[i]] = h.Reply
	}
	reason := fmt.Sprintf("worker %s lost: no liveness beat for %s; handed back", w.worker, silent.Round(time.Millisecond))
	fenced, err := l.Store.FenceLost(ctx, w.pool, w.worker, refs, reason)
	if err != nil {
		// The attempts' leases and AckWait remain the fallback.
		l.Logger.Error("handing back a lost worker's jobs", "pool", w.pool, "worker", w.worker, "err", err)
		return
	}
	for _, r := range fenced {
		if err := l.NATS.Publish(replies[r], []byte("-NAK")); err != nil {
			l.Logger.Warn("naking a lost worker's run message; it is redelivered after AckWait", "job", r.JobID, "err", err)
		}
		l.Logger.Warn("worker lost: job handed back", "pool", w.pool, "worker", w.worker, "job", r.JobID, "attempt", r.Attempt, "silent", silent.Round(time.Millisecond))
	}
}

// readBeat decodes and checks a beat against its subject's pool.
func readBeat(m *nats.Msg) (*queue.Beat, error) {
	pool, err := queue.PoolOfAliveSubject(m.Subject)
	if err != nil {
		return nil, err
	}
	if len(m.Data) > queue.MaxBeatBytes {
		return nil, fmt.Errorf("beat: %d bytes, over the limit of %d", len(m.Data), queue.MaxBeatBytes)
	}
	var b queue.Beat
	if err := json.Unmarshal(m.Data, &b); err != nil {
		return nil, fmt.Errorf("beat: %w", err)
	}
	if err := b.Validate(pool); err != nil {
		return nil, err
	}
	return &b, nil
}
