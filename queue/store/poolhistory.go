package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/db"
)

// PoolHistoryRetention is how pool_history stays bounded. Observations go
// into Fine buckets; buckets older than FineFor are merged into Coarse ones
// (exactly: PoolBucket.Merge keeps runs across the merge), buckets older
// than KeepFor are dropped, and no pool keeps more than MaxRowsPerPool rows,
// the oldest going first. With the defaults a pool holds at most
// 24h/5m + 14d/1h + 2 = 626 rows.
type PoolHistoryRetention struct {
	// Tick is the slot one observation counts for: however many servers
	// observe a pool, it gets at most one tick per slot. Default 10s
	// (the placer's default offer refresh).
	Tick time.Duration
	// Fine is the width of recent buckets. Default 5m.
	Fine time.Duration
	// FineFor is how long buckets stay fine. Default 24h.
	FineFor time.Duration
	// Coarse is the width older buckets are merged into. Default 1h.
	Coarse time.Duration
	// KeepFor is how long any bucket is kept. Default 14 days.
	KeepFor time.Duration
	// MaxRowsPerPool bounds the rows of one pool. Default 1000.
	MaxRowsPerPool int
	// CompactEvery is how often a store compacts, at most. Default 1m.
	CompactEvery time.Duration
	// Spell is the unit the lengths of runs of capacity and of none are
	// counted in: the tick of the spot strategy's look-ahead model, which
	// reads them (spot.PoolHistory.Spell). A whole number of ticks.
	// Default 10m. Changing it makes the runs already counted read in the
	// new unit.
	Spell time.Duration
}

// WithDefaults returns r with every unset field at its default.
func (r PoolHistoryRetention) WithDefaults() PoolHistoryRetention {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&r.Tick, 10*time.Second)
	def(&r.Fine, 5*time.Minute)
	def(&r.FineFor, 24*time.Hour)
	def(&r.Coarse, time.Hour)
	def(&r.KeepFor, 14*24*time.Hour)
	def(&r.CompactEvery, time.Minute)
	def(&r.Spell, 10*time.Minute)
	if r.MaxRowsPerPool == 0 {
		r.MaxRowsPerPool = 1000
	}
	return r
}

func (r PoolHistoryRetention) validate() error {
	switch {
	case r.Tick < time.Second || r.Tick%time.Second != 0:
		return fmt.Errorf("pool_history.tick: must be a whole number of seconds ≥ 1s, got %v", r.Tick)
	case r.Fine < r.Tick || r.Fine%time.Second != 0:
		return fmt.Errorf("pool_history.fine: must be whole seconds and ≥ tick (%v), got %v", r.Tick, r.Fine)
	case r.Coarse < r.Fine || r.Coarse%r.Fine != 0:
		return fmt.Errorf("pool_history.coarse: must be a multiple of fine (%v), got %v", r.Fine, r.Coarse)
	case r.FineFor < r.Coarse:
		return fmt.Errorf("pool_history.fine_for: must be ≥ coarse (%v), got %v", r.Coarse, r.FineFor)
	case r.KeepFor < r.FineFor:
		return fmt.Errorf("pool_history.keep_for: must be ≥ fine_for (%v), got %v", r.FineFor, r.KeepFor)
	case r.MaxRowsPerPool < 2:
		return fmt.Errorf("pool_history.max_rows_per_pool: must be ≥ 2, got %d", r.MaxRowsPerPool)
	case r.CompactEvery < 0:
		return fmt.Errorf("pool_history.compact_every: must not be negative, got %v", r.CompactEvery)
	case r.Spell < r.Tick || r.Spell%r.Tick != 0:
		return fmt.Errorf("pool_history.spell: must be a whole number of ticks (%v), got %v", r.Tick, r.Spell)
	}
	return nil
}

// HistoryTick is the slot one observation of a pool counts for.
func (s *Store) HistoryTick() time.Duration { return s.HistoryRetention.WithDefaults().Tick }

// spellTicks is the ticks in one spell.
func (r PoolHistoryRetention) spellTicks() int32 { return int32(r.Spell / r.Tick) }

// bucketOf returns the fine bucket and slot an observation at t falls in.
// The bucket is taken from the slot's start, so that one slot never
// straddles two buckets.
func (r PoolHistoryRetention) bucketOf(t time.Time) (bucket time.Time, slot int64) {
	tick, fine := int64(r.Tick/time.Second), int64(r.Fine/time.Second)
	sec := t.Unix()
	slot = sec - mod(sec, tick)
	return time.Unix(slot-mod(slot, fine), 0).UTC(), slot
}

func mod(a, b int64) int64 { return ((a % b) + b) % b }

// ObservePools records one observation of each pool at t (an offer
// refresh), then compacts the history when it is due.
func (s *Store) ObservePools(ctx context.Context, at time.Time, obs []queue.PoolObservation) error {
	r := s.HistoryRetention.WithDefaults()
	if err := r.validate(); err != nil {
		return err
	}
	bucket, slot := r.bucketOf(at)
	// Every observer (each server's placer and autoscaler) writes its rows
	// in the order of the pools' names, so that two transactions never wait
	// for each other's rows.
	obs = slices.SortedFunc(slices.Values(obs), func(a, b queue.PoolObservation) int { return strings.Compare(a.Pool, b.Pool) })
	err := s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
		for _, o := range obs {
			if err := q.PoolHistoryObserve(ctx, db.PoolHistoryObserveParams{
				Pool: o.Pool, BucketStart: bucket, WidthSeconds: int32(r.Fine / time.Second), Up: o.Up, Slot: slot,
				PriceMicros: o.PriceMicros, Currency: o.Currency, SpellTicks: r.spellTicks(),
			}); err != nil {
				return nil, fmt.Errorf("recording availability of pool %s: %w", o.Pool, err)
			}
		}
		return nil, nil
	})
	if err != nil {
		return err
	}
	return s.compactIfDue(ctx, at, r)
}

// RecordPoolEvent counts a launch, a refused launch or a preemption against
// its pool, and as one observation of its capacity (up for a launch, down
// otherwise) unless its slot was observed already. A zero At is now.
func (s *Store) RecordPoolEvent(ctx context.Context, e queue.PoolEvent) error {
	r := s.HistoryRetention.WithDefaults()
	if err := r.validate(); err != nil {
		return err
	}
	if e.Pool == "" {
		return fmt.Errorf("pool_event.pool: must not be empty")
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	p := db.PoolHistoryCountParams{Pool: e.Pool, WidthSeconds: int32(r.Fine / time.Second)}
	switch e.Kind {
	case queue.PoolLaunched:
		p.Launches = 1
	case queue.PoolNoCapacity:
		p.NoCapacity = 1
	case queue.PoolPreempted:
		p.Preemptions = 1
	default:
		return fmt.Errorf("pool_event.kind: must be %s, %s or %s, got %q", queue.PoolLaunched, queue.PoolNoCapacity, queue.PoolPreempted, e.Kind)
	}
	bucket, slot := r.bucketOf(e.At)
	p.BucketStart = bucket
	return s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
		if err := q.PoolHistoryCount(ctx, p); err != nil {
			return nil, fmt.Errorf("counting %s in pool %s: %w", e.Kind, e.Pool, err)
		}
		err := q.PoolHistoryObserve(ctx, db.PoolHistoryObserveParams{Pool: e.Pool, BucketStart: bucket,
			WidthSeconds: p.WidthSeconds, Up: e.Up(), Slot: slot, SpellTicks: r.spellTicks()})
		if err != nil {
			return nil, fmt.Errorf("recording availability of pool %s: %w", e.Pool, err)
		}
		return nil, nil
	})
}

// countPreemption counts a preempted attempt against its pool, inside the
// transaction that ends it.
func (s *Store) countPreemption(ctx context.Context, q *db.Queries, id uuid.UUID, attempt int) error {
	r := s.HistoryRetention.WithDefaults()
	bucket, _ := r.bucketOf(time.Now())
	err := q.PoolHistoryCountPreemption(ctx, db.PoolHistoryCountPreemptionParams{
		BucketStart: bucket, WidthSeconds: int32(r.Fine / time.Second), JobID: id, Attempt: int32(attempt)})
	if err != nil {
		return fmt.Errorf("counting the preemption of job %s attempt %d: %w", id, attempt, err)
	}
	return nil
}

// PoolBuckets returns the buckets of every pool (or of pool) since a time,
// each pool's oldest first.
func (s *Store) PoolBuckets(ctx context.Context, pool string, since time.Time) ([]queue.PoolBucket, error) {
	rows, err := s.q.PoolHistoryList(ctx, db.PoolHistoryListParams{Since: since, Pool: sql.NullString{String: pool, Valid: pool != ""}})
	if err != nil {
		return nil, fmt.Errorf("reading pool history: %w", err)
	}
	spell := s.HistoryRetention.WithDefaults().spellTicks()
	out := make([]queue.PoolBucket, len(rows))
	for i, r := range rows {
		out[i] = poolBucketOf(r, spell)
	}
	return out, nil
}

// PoolSummaries folds each pool's buckets since a time into one, keyed by
// pool: what the spot strategy's history of the pool is.
func (s *Store) PoolSummaries(ctx context.Context, since time.Time) (map[string]queue.PoolBucket, error) {
	buckets, err := s.PoolBuckets(ctx, "", since)
	if err != nil {
		return nil, err
	}
	out := map[string]queue.PoolBucket{}
	for _, b := range buckets {
		out[b.Pool] = out[b.Pool].Merge(b)
	}
	return out, nil
}

func poolBucketOf(r db.PoolHistory, spellTicks int32) queue.PoolBucket {
	b := queue.PoolBucket{Pool: r.Pool, Start: r.BucketStart.UTC(), Width: time.Duration(r.WidthSeconds) * time.Second,
		Ticks: int(r.Ticks), UpTicks: int(r.UpTicks), UpRuns: int(r.UpRuns), FirstUp: r.FirstUp, LastUp: r.LastUp,
		TailRun: int(r.TailRun), HeadRun: int(r.HeadRun), SpellTicks: int(spellTicks),
		Launches: int(r.Launches), NoCapacity: int(r.NoCapacity), Preemptions: int(r.Preemptions),
		PriceMicros: r.PriceMicros, Currency: r.Currency}
	copy(b.UpSpells[:], r.UpSpells)
	copy(b.DownSpells[:], r.DownSpells)
	return b
}

// compactIfDue compacts at most once per CompactEvery per store.
func (s *Store) compactIfDue(ctx context.Context, now time.Time, r PoolHistoryRetention) error {
	s.historyMu.Lock()
	due := s.compactedAt.IsZero() || now.Sub(s.compactedAt) >= r.CompactEvery
	if due {
		s.compactedAt = now
	}
	s.historyMu.Unlock()
	if !due {
		return nil
	}
	return s.CompactPoolHistory(ctx, now)
}

// CompactPoolHistory applies the retention rule as of now: each pool's fine
// buckets older than FineFor are merged into coarse buckets, buckets older
// than KeepFor dropped, and the oldest beyond MaxRowsPerPool dropped. A pool
// another server is compacting is skipped.
func (s *Store) CompactPoolHistory(ctx context.Context, now time.Time) error {
	r := s.HistoryRetention.WithDefaults()
	if err := r.validate(); err != nil {
		return err
	}
	cutoff := now.Add(-r.FineFor).Truncate(r.Coarse)
	oldest := now.Add(-r.KeepFor)
	pools, err := s.q.PoolHistoryPools(ctx, now)
	if err != nil {
		return fmt.Errorf("compacting pool history: %w", err)
	}
	for _, pool := range pools {
		err := s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
			if locked, err := q.PoolHistoryLockPool(ctx, pool); err != nil || !locked {
				return nil, err
			}
			if err := q.PoolHistoryDeleteOlder(ctx, db.PoolHistoryDeleteOlderParams{Pool: pool, Before: oldest}); err != nil {
				return nil, err
			}
			rows, err := q.PoolHistoryOlder(ctx, db.PoolHistoryOlderParams{Pool: pool, Before: cutoff})
			if err != nil {
				return nil, err
			}
			// Group by coarse bucket; only groups holding a fine bucket
			// change (a coarse bucket alone is already compacted).
			var groups [][]db.PoolHistory
			for _, row := range rows {
				start := row.BucketStart.Truncate(r.Coarse)
				if n := len(groups); n > 0 && groups[n-1][0].BucketStart.Truncate(r.Coarse).Equal(start) {
					groups[n-1] = append(groups[n-1], row)
					continue
				}
				groups = append(groups, []db.PoolHistory{row})
			}
			for _, g := range groups {
				if len(g) == 1 && time.Duration(g[0].WidthSeconds)*time.Second == r.Coarse {
					continue
				}
				start := g[0].BucketStart.Truncate(r.Coarse)
				var acc queue.PoolBucket
				var slot int64
				for _, row := range g {
					acc = acc.Merge(poolBucketOf(row, r.spellTicks()))
					slot = max(slot, row.LastSlot)
				}
				acc.Start, acc.Width = start, r.Coarse
				if err := q.PoolHistoryDeleteRange(ctx, db.PoolHistoryDeleteRangeParams{Pool: pool, FromTime: start, ToTime: start.Add(r.Coarse)}); err != nil {
					return nil, err
				}
				m := rowOf(acc, slot)
				if err := q.PoolHistoryInsert(ctx, db.PoolHistoryInsertParams{Pool: m.Pool, BucketStart: m.BucketStart,
					WidthSeconds: m.WidthSeconds, Ticks: m.Ticks, UpTicks: m.UpTicks, UpRuns: m.UpRuns, FirstUp: m.FirstUp,
					LastUp: m.LastUp, TailRun: m.TailRun, HeadRun: m.HeadRun, UpSpells: m.UpSpells, DownSpells: m.DownSpells,
					LastSlot: m.LastSlot, Launches: m.Launches, NoCapacity: m.NoCapacity,
					Preemptions: m.Preemptions, PriceMicros: m.PriceMicros, Currency: m.Currency}); err != nil {
					return nil, err
				}
			}
			return nil, q.PoolHistoryTrim(ctx, db.PoolHistoryTrimParams{Pool: pool, Skip: int32(r.MaxRowsPerPool - 1)})
		})
		if err != nil {
			return fmt.Errorf("compacting the history of pool %s: %w", pool, err)
		}
	}
	return nil
}

func rowOf(b queue.PoolBucket, lastSlot int64) db.PoolHistory {
	return db.PoolHistory{Pool: b.Pool, BucketStart: b.Start, WidthSeconds: int32(b.Width / time.Second),
		Ticks: int32(b.Ticks), UpTicks: int32(b.UpTicks), UpRuns: int32(b.UpRuns), FirstUp: b.FirstUp, LastUp: b.LastUp,
		TailRun: int32(b.TailRun), HeadRun: int32(b.HeadRun), UpSpells: b.UpSpells[:], DownSpells: b.DownSpells[:],
		LastSlot: lastSlot, Launches: int32(b.Launches), NoCapacity: int32(b.NoCapacity),
		Preemptions: int32(b.Preemptions), PriceMicros: b.PriceMicros, Currency: b.Currency}
}
