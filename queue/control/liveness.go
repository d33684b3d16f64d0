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
	}
	return CheckLostAfter(l.LostAfter)
}

// MaxLostAfter bounds Liveness.LostAfter: beyond it a lost worker's job
// would wait about as long as for the lapse of its lease.
const MaxLostAfter = 30 * time.Second

// CheckLostAfter refuses a Liveness.LostAfter that leaves room for fewer
// than three beats or exceeds MaxLostAfter; 0 stands for the default.
func CheckLostAfter(d time.Duration) error {
	if d == 0 {
		return nil
	}
	if d < 3*queue.BeatInterval || d > MaxLostAfter {
		return fmt.Errorf("liveness.lost_after: must be %s (three beats) to %s, got %s", 3*queue.BeatInterval, MaxLostAfter, d)
	}
	return nil
}

// seenWorker is what the monitor knows of one worker: when it last beat,
// and that beat, whose held attempts are decoded only if the worker is
// lost (a busy worker beats with every batch it claims).
type seenWorker struct {
	pool, worker string
	last         time.Time
	subject      string
	beat         []byte
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
		b, err := readBeatSender(m)
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
		w.last, w.subject, w.beat = at, m.Subject, m.Data
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
	b, err := readBeat(w.subject, w.beat)
	if err != nil {
		// Its attempts' leases and AckWait remain the fallback.
		l.Logger.Warn("lost worker's last beat is not valid; its jobs wait for their leases", "pool", w.pool, "worker", w.worker, "err", err)
		return
	}
	if len(b.Held) == 0 {
		l.Logger.Info("worker gone quiet holding no job", "pool", w.pool, "worker", w.worker)
		return
	}
	refs := make([]queue.AttemptRef, len(b.Held))
	replies := make(map[queue.AttemptRef]string, len(b.Held))
	for i, h := range b.Held {
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

// readBeatSender decodes and checks who sent a beat, against its subject's
// pool, leaving the attempts it holds undecoded.
func readBeatSender(m *nats.Msg) (queue.BeatSender, error) {
	pool, err := beatPool(m.Subject, m.Data)
	if err != nil {
		return queue.BeatSender{}, err
	}
	s, err := queue.DecodeBeatSender(m.Data)
	if err != nil {
		return s, fmt.Errorf("beat: %w", err)
	}
	return s, s.Validate(pool)
}

// readBeat decodes and checks a whole beat against its subject's pool.
func readBeat(subject string, data []byte) (*queue.Beat, error) {
	pool, err := beatPool(subject, data)
	if err != nil {
		return nil, err
	}
	var b queue.Beat
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("beat: %w", err)
	}
	if err := b.Validate(pool); err != nil {
		return nil, err
	}
	return &b, nil
}

// beatPool checks a beat's size and returns its subject's pool.
func beatPool(subject string, data []byte) (string, error) {
	pool, err := queue.PoolOfAliveSubject(subject)
	if err != nil {
		return "", err
	}
	if len(data) > queue.MaxBeatBytes {
		return "", fmt.Errorf("beat: %d bytes, over the limit of %d", len(data), queue.MaxBeatBytes)
	}
	return pool, nil
}
