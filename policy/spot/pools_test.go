package spot

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestAllPoolsOptimumIsAtMostEverySinglePoolOptimumAndEveryStrategy(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		gap := rapid.SampledFrom([]time.Duration{time.Minute, 10 * time.Minute}).Draw(t, "gap")
		ticks := rapid.IntRange(10, 100).Draw(t, "ticks")
		traces := make([]Trace, rapid.IntRange(2, 3).Draw(t, "pools"))
		for i := range traces {
			avail := rapid.SliceOfN(rapid.Int32Range(0, 1), ticks, ticks).Draw(t, fmt.Sprintf("pool%d", i))
			traces[i] = trace(fmt.Sprintf("p%d", i), gap, avail...)
		}
		job := genJob(t, gap, ticks)
		job.Move = genMove(t, gap)
		c, err := ComparePools(traces, job, handPrices, Strategies(), Strategies())
		if err != nil {
			t.Fatal(err)
		}
		if !c.Optimum.DeadlineMet {
			t.Fatalf("the all-pools optimum missed a feasible deadline")
		}
		for i, opt := range c.SingleOptimum {
			if c.Optimum.CostMicros > opt.CostMicros {
				t.Fatalf("all-pools optimum %d micros over pool %s's optimum %d", c.Optimum.CostMicros, c.Pools[i], opt.CostMicros)
			}
			for _, o := range c.Single[i] {
				if o.DeadlineMet && o.CostMicros < opt.CostMicros {
					t.Fatalf("%s on pool %s cost %d micros, under its optimum %d", o.Strategy, c.Pools[i], o.CostMicros, opt.CostMicros)
				}
			}
		}
		for _, o := range c.Multi {
			if !o.DeadlineMet {
				if o.Strategy != (SpotOnly{}).Name() {
					t.Fatalf("%s missed the deadline on all pools", o.Strategy)
				}
				continue
			}
			if o.CostMicros < c.Optimum.CostMicros {
				t.Fatalf("%s cost %d micros on all pools, under the optimum %d", o.Strategy, o.CostMicros, c.Optimum.CostMicros)
			}
		}
	})
}

// recorder plays st and records every action it takes.
type recorder struct {
	st   Strategy
	seen *[]Action
}

func (r recorder) Name() string { return r.st.Name() }

func (r recorder) Decide(s State) Action {
	a := r.st.Decide(s)
	*r.seen = append(*r.seen, a)
	return a
}

func TestNoDecisionReadsTheFutureOfAnyPool(t *testing.T) {
	t.Parallel()
	// Two sets of pools that agree up to tick k and differ after it: every
	// decision up to k must be the same on both.
	rapid.Check(t, func(t *rapid.T) {
		gap := 10 * time.Minute
		ticks := rapid.IntRange(10, 80).Draw(t, "ticks")
		k := rapid.IntRange(0, ticks-1).Draw(t, "k")
		n := rapid.IntRange(1, 3).Draw(t, "pools")
		var a, b []Trace
		for i := range n {
			past := rapid.SliceOfN(rapid.Int32Range(0, 1), k+1, k+1).Draw(t, fmt.Sprintf("past%d", i))
			fa := rapid.SliceOfN(rapid.Int32Range(0, 1), ticks-k-1, ticks-k-1).Draw(t, fmt.Sprintf("future a%d", i))
			fb := rapid.SliceOfN(rapid.Int32Range(0, 1), ticks-k-1, ticks-k-1).Draw(t, fmt.Sprintf("future b%d", i))
			a = append(a, trace(fmt.Sprintf("p%d", i), gap, append(append([]int32(nil), past...), fa...)...))
			b = append(b, trace(fmt.Sprintf("p%d", i), gap, append(append([]int32(nil), past...), fb...)...))
		}
		job := genJob(t, gap, ticks)
		job.Move = genMove(t, gap)
		for _, st := range Strategies() {
			var seenA, seenB []Action
			if _, err := Simulate(a, job, handPrices, recorder{st, &seenA}); err != nil {
				t.Fatal(err)
			}
			if _, err := Simulate(b, job, handPrices, recorder{st, &seenB}); err != nil {
				t.Fatal(err)
			}
			for x := 0; x <= k && x < len(seenA) && x < len(seenB); x++ {
				if seenA[x] != seenB[x] {
					t.Fatalf("%s decided %+v at tick %d on one future and %+v on the other", st.Name(), seenA[x], x, seenB[x])
				}
			}
		}
	})
}

func TestComparePoolsNeedsTwoPools(t *testing.T) {
	t.Parallel()
	_, err := ComparePools([]Trace{trace("a", time.Minute, 1, 1)}, Job{Compute: time.Minute, Deadline: 2 * time.Minute}, handPrices, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "at least two pools") {
		t.Fatalf("err = %v, want one asking for two pools", err)
	}
}
