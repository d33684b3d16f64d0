package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	// Claims, when set, holds the attempts this server's worker service
	// started lately: a worker lost before a beat of its announces an
	// attempt has that attempt handed back with the rest.
	Claims *RecentClaims
	// Workers, when set, counts the workers of each pool the monitor
	// hears, when asked (the metrics' gpuq_workers).
	Workers *LiveWorkers
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
	// sender is who its latest beat said it is, and whether it takes no
	// work after host errors.
	sender  queue.BeatSender
	subject string
	beat    []byte
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
		w.last, w.subject, w.beat, w.sender = at, m.Subject, m.Data, b
		cfg.Claims.heard(b.Pool, b.Worker, at)
	})
	if err != nil {
		return fmt.Errorf("subscribing to worker beats: %w", err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // the connection may be closing
	cfg.Workers.serve(func() map[string]PoolWorkers {
		mu.Lock()
		defer mu.Unlock()
		pools := map[string]PoolWorkers{}
		for _, w := range seen {
			n := pools[w.pool]
			n.Live++
			if w.sender.PausedUntil != nil {
				n.Paused++
			}
			pools[w.pool] = n
		}
		return pools
	}, func() []queue.LiveWorker {
		mu.Lock()
		heard := make([]seenWorker, 0, len(seen))
		for _, w := range seen {
			heard = append(heard, *w)
		}
		mu.Unlock()
		out := make([]queue.LiveWorker, len(heard))
		for i, w := range heard {
			out[i] = queue.LiveWorker{Worker: w.worker, Node: w.sender.Node, Pool: w.pool, LastBeatAt: w.last,
				PausedUntil: w.sender.PausedUntil, PauseReason: w.sender.PauseReason}
			// Decoded only when asked, and not while beats wait: a busy
			// worker's beat holds hundreds of attempts.
			if b, err := readBeat(w.subject, w.beat); err == nil {
				out[i].Held = len(b.Held)
			}
		}
		return out
	})
	defer cfg.Workers.serve(nil, nil)
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
		// A worker that still beats was heard within LostAfter, and its
		// beats announce every claim older than announcedWithin before
		// that; a worker never heard (its beats refused) is left to its
		// leases, as before it claimed.
		cfg.Claims.forget(now.Add(-cfg.LostAfter - announcedWithin - queue.BeatInterval))
		for _, w := range lost {
			cfg.handBack(ctx, w, now.Sub(w.last))
		}
	}
}

// handBack fences the attempts a lost worker held and naks their messages:
// those its last beat announced, and those this server started for it
// since.
func (l *Liveness) handBack(ctx context.Context, w *seenWorker, silent time.Duration) {
	var held []queue.HeldAttempt
	if b, err := readBeat(w.subject, w.beat); err != nil {
		// Its attempts' leases and AckWait remain the fallback.
		l.Logger.Warn("lost worker's last beat is not valid; its jobs wait for their leases", "pool", w.pool, "worker", w.worker, "err", err)
	} else {
		held = b.Held
	}
	var refs []queue.AttemptRef
	replies := make(map[queue.AttemptRef]string, len(held))
	for _, h := range append(held, l.Claims.take(w.pool, w.worker)...) {
		r := queue.AttemptRef{JobID: h.JobID, Attempt: h.Attempt}
		if _, ok := replies[r]; !ok {
			refs = append(refs, r)
			replies[r] = h.Reply
		}
	}
	if len(refs) == 0 {
		l.Logger.Info("worker gone quiet holding no job", "pool", w.pool, "worker", w.worker)
		return
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

// RecentClaims holds, for the liveness monitor, the attempts the worker
// service started lately and the reply subjects of their run messages. A
// worker announces an attempt in a beat once its claim's reply reaches it
// (within queue.BeatInterval, and at most 20 ms after when it is busy); a
// worker lost in between would leave the attempt to its lease and its
// message to AckWait. The monitor hands such attempts back with the ones
// the worker's last beat announced. The zero value is ready; a nil
// *RecentClaims holds nothing.
type RecentClaims struct {
	mu       sync.Mutex
	byWorker map[recentWorker][]recentClaim
}

type recentWorker struct{ pool, worker string }

type recentClaim struct {
	at   time.Time
	held queue.HeldAttempt
}

// announcedWithin is how long after a claim a beat of its worker surely
// announces the attempt: a beat heard later than that lets the claim go.
const announcedWithin = 250 * time.Millisecond

// Started records an attempt the worker service started for a worker,
// with the reply subject of the run message it was claimed for.
func (c *RecentClaims) Started(pool, worker string, h queue.HeldAttempt) {
	if c == nil || h.Reply == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byWorker == nil {
		c.byWorker = map[recentWorker][]recentClaim{}
	}
	k := recentWorker{pool, worker}
	claims := append(c.byWorker[k], recentClaim{at: time.Now(), held: h})
	if len(claims) > queue.MaxBeatHeld {
		// A worker's beat holds no more; the oldest were announced.
		claims = claims[len(claims)-queue.MaxBeatHeld:]
	}
	c.byWorker[k] = claims
}

// heard lets go of a worker's claims that a beat heard at at announces.
func (c *RecentClaims) heard(pool, worker string, at time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := recentWorker{pool, worker}
	if claims, ok := c.byWorker[k]; ok {
		c.pruneLocked(k, claims, at.Add(-announcedWithin))
	}
}

// take returns and forgets a worker's claims.
func (c *RecentClaims) take(pool, worker string) []queue.HeldAttempt {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := recentWorker{pool, worker}
	claims := c.byWorker[k]
	delete(c.byWorker, k)
	out := make([]queue.HeldAttempt, len(claims))
	for i, rc := range claims {
		out[i] = rc.held
	}
	return out
}

// forget lets go of every claim made before cutoff.
func (c *RecentClaims) forget(cutoff time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, claims := range c.byWorker {
		c.pruneLocked(k, claims, cutoff)
	}
}

// pruneLocked keeps a worker's claims made at or after cutoff.
func (c *RecentClaims) pruneLocked(k recentWorker, claims []recentClaim, cutoff time.Time) {
	n := 0
	for n < len(claims) && claims[n].at.Before(cutoff) {
		n++
	}
	switch {
	case n == len(claims):
		delete(c.byWorker, k)
	case n > 0:
		c.byWorker[k] = slices.Delete(claims, 0, n)
	}
}
