package spot

import (
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkSimulate48hOn20000Ticks replays a 48-hour job over four pools of a
// 20,000-tick trace (32-second ticks, as in the preemption traces), whose
// availability flips at random every hour or so.
func BenchmarkSimulate48hOn20000Ticks(b *testing.B) {
	const ticks = 20_000
	gap := 32 * time.Second
	rng := rand.New(rand.NewPCG(1, 2))
	traces := make([]Trace, 4)
	for i := range traces {
		avail := make([]int32, ticks)
		up := int32(1)
		for x := range avail {
			if rng.IntN(110) == 0 {
				up = 1 - up
			}
			avail[x] = up
		}
		traces[i] = trace(string(rune('a'+i)), gap, avail...)
	}
	job := Job{Compute: 36 * time.Hour, Deadline: 48 * time.Hour, Overhead: 12 * time.Minute}
	for _, st := range Strategies() {
		b.Run(st.Name(), func(b *testing.B) {
			for b.Loop() {
				if _, err := Simulate(traces, job, handPrices, st); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("optimum", func(b *testing.B) {
		for b.Loop() {
			if _, err := Optimum(traces, job, handPrices); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLiveLookAheadDecision is one decision of the live scheduler's
// strategy for a 48-hour job with 12 hours of slack and spot down: states
// at the scheduler's 10-second tick, pools modelled in 10-minute spells.
// "warm" finds its table built; "cold" builds it each time (the first
// decision on a model).
func BenchmarkLiveLookAheadDecision(b *testing.B) {
	h := observed(append(repeat(30, 20, 3, 20, 1, 20, 5), 20, 2)...)
	const n = 60 // 10-second ticks in a spell
	live := PoolHistory{Ticks: h.Ticks * n, UpTicks: h.UpTicks * n, UpRuns: h.UpRuns, Run: h.Run * n,
		UpSpells: h.UpSpells, DownSpells: h.DownSpells, Spell: 10 * time.Minute, up: h.up}
	s := State{Compute: 48 * time.Hour, Deadline: 60 * time.Hour, Overhead: 10 * time.Minute, Tick: 10 * time.Second,
		Current: Placement{Kind: Wait}, Prices: handPrices, Pools: []Pool{{ID: "a", History: live}, {ID: "b", History: live}}}
	st := NewLookAhead()
	b.Run("warm", func(b *testing.B) {
		st.Decide(s)
		for b.Loop() {
			st.Decide(s)
		}
	})
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			lookaheads.Lock()
			lookaheads.tables = nil
			lookaheads.Unlock()
			st.Decide(s)
		}
	})
}
