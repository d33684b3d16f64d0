package queue_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpuq/gpuq/policy/spot"
	"github.com/gpuq/gpuq/queue"
)

// Buckets merged in any split must summarise the ticks exactly as the spot
// strategy's PoolHistory does when it observes every tick in one process.
func TestPoolBucketMergeOfAnySplitEqualsObservingEveryTick(t *testing.T) {
	t.Parallel()
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := 1 + rng.IntN(60)
		var want spot.PoolHistory
		var whole queue.PoolBucket
		var parts []queue.PoolBucket
		part := queue.PoolBucket{}
		up := rng.IntN(2) == 0
		for i := range n {
			if rng.IntN(4) == 0 {
				up = !up
			}
			want.Observe(up)
			whole = whole.Observe(up)
			part = part.Observe(up)
			if rng.IntN(5) == 0 || i == n-1 {
				parts = append(parts, part)
				part = queue.PoolBucket{}
				if rng.IntN(3) == 0 {
					parts = append(parts, queue.PoolBucket{Preemptions: 1}) // a bucket with counts only
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
