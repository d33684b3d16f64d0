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
