package store_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
)

var historyStart = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// Two servers observing the same pool in the same slot count one tick; the
// history each reads is the same, and the same after a server restarts.
func TestPoolHistoryIsSharedByServersAndCountsOneTickPerSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, url := queuetest.Store(t, nil)
	b, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	obs := func(s *store.Store, at time.Duration, up bool) {
		t.Helper()
		o := []queue.PoolObservation{{Pool: "sim-a-spot", Up: up, PriceMicros: 900_000, Currency: "EUR"}}
		if err := s.ObservePools(ctx, historyStart.Add(at), o); err != nil {
			t.Fatal(err)
		}
	}
	obs(a, 0, true)
	obs(b, 3*time.Second, true) // same 10 s slot: already counted
	obs(b, 10*time.Second, true)
	obs(a, 20*time.Second, false)
	obs(b, 25*time.Second, true) // same slot as the down tick: not counted
	obs(b, 30*time.Second, false)
	obs(a, 5*time.Minute, true) // the next bucket
	for _, s := range []*store.Store{a, b} {
		sum, err := s.PoolSummaries(ctx, historyStart.Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		got := sum["sim-a-spot"]
		if got.Ticks != 5 || got.UpTicks != 3 || got.UpRuns != 2 || got.TailRun != 1 || !got.LastUp || got.PriceMicros != 900_000 {
			t.Fatalf("summary %+v, want 5 ticks, 3 up, 2 runs, ending with a 1-tick up run at 0.90 EUR", got)
		}
	}
	buckets, err := a.PoolBuckets(ctx, "sim-a-spot", historyStart.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(buckets) != 2 || buckets[0].Width != 5*time.Minute || buckets[0].Ticks != 4 {
		t.Fatalf("buckets %+v, want two 5-minute buckets, the first with 4 ticks", buckets)
	}
}

func TestPoolEventsCountAndObserveTheirPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	for i, kind := range []string{queue.PoolLaunched, queue.PoolNoCapacity, queue.PoolNoCapacity} {
		if err := s.RecordPoolEvent(ctx, queue.PoolEvent{Pool: "p", Kind: kind, At: historyStart.Add(time.Duration(i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	err := s.RecordPoolEvent(ctx, queue.PoolEvent{Pool: "p", Kind: "exploded", At: historyStart})
	if err == nil || !strings.Contains(err.Error(), "pool_event.kind") {
		t.Fatalf("an unknown kind: err %v, want one naming pool_event.kind", err)
	}
	got := must(s.PoolSummaries(ctx, time.Time{}))(t)["p"]
	if got.Launches != 1 || got.NoCapacity != 2 || got.Ticks != 3 || got.UpTicks != 1 || got.TailRun != 2 {
		t.Fatalf("summary %+v, want 1 launch, 2 refused, 3 ticks of which 1 up", got)
	}
}

// A preempted hand-back counts against the pool the attempt ran in, in the
// same transaction that ends the attempt; a worker's shutdown does not.
func TestPreemptedHandBackCountsAgainstItsPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	id := placedJob(t, s)
	for _, h := range []struct{ outcome, reason string }{
		{queue.OutcomePreempted, "spot notice"},
		{queue.OutcomeFailed, "exit 1"},
		{queue.OutcomeShutdown, "shutdown: worker w was told to stop"},
		{queue.OutcomeHostError, "host error on w: uploading outputs: connection refused"},
	} {
		c, err := claim(t, s, id, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Requeue(ctx, id, c.Job.Attempt, h.outcome, nil, h.reason); err != nil {
			t.Fatal(err)
		}
	}
	got := must(s.PoolSummaries(ctx, time.Time{}))(t)["p"]
	if got.Preemptions != 1 {
		t.Fatalf("pool p counted %d preemptions, want 1 (neither a failure, a worker's shutdown nor a host error is one)", got.Preemptions)
	}
	// A host error counts against the job's retries.max_preemptions, which
	// bounds a job that breaks every worker.
	j := must(s.Job(ctx, id))(t)
	if j.Preemptions != 2 || j.Errors != 1 || j.State != queue.StatePlaced {
		t.Fatalf("job after a preemption, an error, a shutdown and a host error: %d preemptions, %d errors, %s; want 2, 1, placed", j.Preemptions, j.Errors, j.State)
	}
}

// Compaction merges old fine buckets into coarse ones without changing the
// history the strategy reads, and bounds the rows of every pool.
func TestPoolHistoryCompactionKeepsTheHistoryAndBoundsRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	s.HistoryRetention = store.PoolHistoryRetention{Tick: time.Second, Fine: 10 * time.Second, Coarse: time.Minute,
		FineFor: 2 * time.Minute, KeepFor: time.Hour, MaxRowsPerPool: 100, CompactEvery: time.Hour, Spell: 3 * time.Second}
	rng := rand.New(rand.NewPCG(3, 4))
	want := queue.PoolBucket{SpellTicks: 3}
	up := true
	const span = 20 * time.Minute
	for at := time.Duration(0); at < span; at += 2 * time.Second {
		if rng.IntN(10) == 0 {
			up = !up
		}
		want = want.Observe(up)
		if err := s.ObservePools(ctx, historyStart.Add(at), []queue.PoolObservation{{Pool: "p", Up: up}}); err != nil {
			t.Fatal(err)
		}
	}
	same := func(when string, got queue.PoolBucket) {
		t.Helper()
		gotUp, gotDown := got.Spells()
		wantUp, wantDown := want.Spells()
		if got.Ticks != want.Ticks || got.UpTicks != want.UpTicks || got.UpRuns != want.UpRuns || got.TailRun != want.TailRun ||
			gotUp != wantUp || gotDown != wantDown {
			t.Fatalf("%s %+v, want %+v", when, got, want)
		}
	}
	same("before compaction", must(s.PoolSummaries(ctx, time.Time{}))(t)["p"])
	now := historyStart.Add(span)
	if err := s.CompactPoolHistory(ctx, now); err != nil {
		t.Fatal(err)
	}
	buckets := must(s.PoolBuckets(ctx, "p", time.Time{}))(t)
	// 2 min of 10 s buckets (plus the one being filled), then 1-minute ones.
	if bound := 12 + 1 + int(span/time.Minute); len(buckets) > bound || len(buckets) < 20 {
		t.Fatalf("%d rows after compaction, want 20–%d", len(buckets), bound)
	}
	coarse := 0
	for _, b := range buckets {
		if b.Width == time.Minute {
			coarse++
			if b.Start.Before(now.Add(-2*time.Minute).Truncate(time.Minute)) == false {
				t.Fatalf("coarse bucket %v inside the fine window", b.Start)
			}
		}
	}
	if coarse < 17 {
		t.Fatalf("%d coarse buckets, want ≥ 17", coarse)
	}
	same("after compaction", must(s.PoolSummaries(ctx, time.Time{}))(t)["p"])
	// Compacting again changes nothing.
	if err := s.CompactPoolHistory(ctx, now); err != nil {
		t.Fatal(err)
	}
	if again := must(s.PoolBuckets(ctx, "p", time.Time{}))(t); len(again) != len(buckets) {
		t.Fatalf("a second compaction left %d rows, want %d", len(again), len(buckets))
	}

	// Past KeepFor and over MaxRowsPerPool, the oldest go.
	s.HistoryRetention.KeepFor, s.HistoryRetention.MaxRowsPerPool = 10*time.Minute, 6
	if err := s.CompactPoolHistory(ctx, now); err != nil {
		t.Fatal(err)
	}
	left := must(s.PoolBuckets(ctx, "p", time.Time{}))(t)
	if len(left) != 6 {
		t.Fatalf("%d rows left, want MaxRowsPerPool = 6", len(left))
	}
	if last := left[len(left)-1]; !last.Start.Equal(buckets[len(buckets)-1].Start) {
		t.Fatalf("the newest bucket %v was dropped (left %v)", buckets[len(buckets)-1].Start, last.Start)
	}
}

// With the default retention, observations every 10 s count each run that
// ended by its length in 10-minute spells, however the 5-minute buckets cut
// it, and a server restarted later reads the same.
func TestPoolHistoryCountsRunLengthsInTenMinuteSpells(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, url := queuetest.Store(t, nil)
	at := historyStart.Add(7 * time.Second) // runs straddle the buckets
	for _, run := range []struct {
		up   bool
		last time.Duration
	}{
		{true, 25 * time.Minute}, {false, 40 * time.Minute}, {true, 2*time.Hour + 30*time.Minute},
		{false, 4 * time.Minute}, {true, 13 * time.Minute}, {false, 20 * time.Second}, {true, 9 * time.Minute},
	} {
		for end := at.Add(run.last); at.Before(end); at = at.Add(10 * time.Second) {
			if err := s.ObservePools(ctx, at, []queue.PoolObservation{{Pool: "p", Up: run.up}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	restarted, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer restarted.Close()
	sum := must(restarted.PoolSummaries(ctx, time.Time{}))(t)["p"]
	up, down := sum.Spells()
	// Up: 25 min is 3 spells, 2.5 h 12 or more (the last), 13 min 1; the
	// 9 minutes going on are no run yet. Down: 40 min 4, 4 min and 20 s 1.
	wantUp := [queue.PoolSpellBuckets]int32{0: 1, 2: 1, 11: 1}
	wantDown := [queue.PoolSpellBuckets]int32{0: 2, 3: 1}
	if up != wantUp || down != wantDown || sum.TailRun != 54 || !sum.LastUp {
		t.Fatalf("spells up %v down %v, tail run %d (up %v); want up %v down %v and a 54-tick up run going on",
			up, down, sum.TailRun, sum.LastUp, wantUp, wantDown)
	}
}

func TestPoolHistoryRetentionNamesTheBadField(t *testing.T) {
	t.Parallel()
	s, _ := queuetest.Store(t, nil)
	s.HistoryRetention = store.PoolHistoryRetention{Fine: time.Minute, Coarse: 90 * time.Second}
	err := s.ObservePools(context.Background(), historyStart, []queue.PoolObservation{{Pool: "p", Up: true}})
	if err == nil || !strings.Contains(err.Error(), "pool_history.coarse") {
		t.Fatalf("err %v, want one naming pool_history.coarse", err)
	}
	if n := len(must(s.PoolBuckets(context.Background(), "", time.Time{}))(t)); n != 0 {
		t.Fatalf("a bad retention recorded %d rows", n)
	}
}

func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
