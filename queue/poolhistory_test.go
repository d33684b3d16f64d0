package queue_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpuq/gpuq/policy/spot"
	"github.com/gpuq/gpuq/queue"
)

// Buckets merged in any split must summarise the ticks exactly as the spot
// strategy's PoolHistory does when it observes every tick in one process,
// the lengths of the runs seen to end included; counted in spells of
// several ticks, those lengths are the runs' lengths in spells.
func TestPoolBucketMergeOfAnySplitEqualsObservingEveryTick(t *testing.T) {
	t.Parallel()
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := 1 + rng.IntN(120)
		unit := 1 + rng.IntN(4)*rng.IntN(2) // one tick half the time
		var want spot.PoolHistory
		var wantUp, wantDown [queue.PoolSpellBuckets]int32
		run := 0
		whole := queue.PoolBucket{SpellTicks: unit}
		var parts []queue.PoolBucket
		part := queue.PoolBucket{SpellTicks: unit}
		up := rng.IntN(2) == 0
		for i := range n {
			if rng.IntN(4) == 0 && i > 0 {
				spells := &wantDown
				if up {
					spells = &wantUp
				}
				spells[queue.SpellOf(run, unit)]++
				run = 0
				up = !up
			}
			run++
			want.Observe(up)
			whole = whole.Observe(up)
			part = part.Observe(up)
			if rng.IntN(5) == 0 || i == n-1 {
				parts = append(parts, part)
				part = queue.PoolBucket{SpellTicks: unit}
				if rng.IntN(3) == 0 {
					parts = append(parts, queue.PoolBucket{Preemptions: 1, SpellTicks: unit}) // a bucket with counts only
				}
			}
		}
		var merged queue.PoolBucket
		for _, p := range parts {
			merged = merged.Merge(p)
		}
		for _, got := range []queue.PoolBucket{whole, merged} {
			if got.Ticks != want.Ticks || got.UpTicks != want.UpTicks || got.UpRuns != want.UpRuns || got.TailRun != want.Run {
				t.Fatalf("seed %d: got ticks %d up %d runs %d tail %d, want %+v", seed, got.Ticks, got.UpTicks, got.UpRuns, got.TailRun, want)
			}
			gotUp, gotDown := got.Spells()
			if gotUp != wantUp || gotDown != wantDown {
				t.Fatalf("seed %d, spells of %d ticks: got up %v down %v, want up %v down %v", seed, unit, gotUp, gotDown, wantUp, wantDown)
			}
			if unit == 1 && (gotUp != want.UpSpells || gotDown != want.DownSpells) {
				t.Fatalf("seed %d: got up %v down %v, PoolHistory counts up %v down %v", seed, gotUp, gotDown, want.UpSpells, want.DownSpells)
			}
		}
	}
}

func TestPoolBucketMergeSpansBothAndKeepsTheLatestPrice(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := queue.PoolBucket{Pool: "p", Start: t0, Width: 5 * time.Minute, PriceMicros: 1, Currency: "EUR", Launches: 1}
	b := queue.PoolBucket{Pool: "p", Start: t0.Add(10 * time.Minute), Width: 5 * time.Minute, PriceMicros: 2, Currency: "EUR", NoCapacity: 2}
	got := a.Merge(b)
	if got.Width != 15*time.Minute || got.PriceMicros != 2 || got.Launches != 1 || got.NoCapacity != 2 {
		t.Fatalf("merged %+v", got)
	}
	if c := got.Merge(queue.PoolBucket{Start: t0.Add(15 * time.Minute), Width: time.Minute}); c.PriceMicros != 2 {
		t.Fatalf("a bucket without a price dropped the latest: %+v", c)
	}
}
