package control_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters/sim"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// instantPool is a pool of the simulated cloud whose machines boot at its
// next step (20 ms): the cloud treats a zero boot delay as its default.
func instantPool() sim.PoolConfig {
	p := simPool("od", "DE", "on-demand", "3.60")
	p.BootDelay = time.Nanosecond
	return p
}

// BenchmarkSubmitToStartFromZero measures, with the pool at zero, the time
// from a submission to its job's start: placement, a launch, a worker
// process starting and claiming.
func BenchmarkSubmitToStartFromZero(b *testing.B) {
	const idle = 300 * time.Millisecond
	c := startScaled(b, []sim.PoolConfig{instantPool()}, control.AutoscalerConfig{Interval: 100 * time.Millisecond,
		Defaults: control.PoolLimits{Max: 1, IdleTimeout: idle}}, false)
	var total time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		queuetest.Eventually(b, 30*time.Second, "the pool back at zero", func() bool { return len(c.live(b)) == 0 })
		b.StartTimer()
		start := time.Now()
		id := c.submit(b, fmt.Sprintf("name: b%d\ncommand: [/bin/true]\n", i))
		queuetest.Eventually(b, 30*time.Second, "the job to start", func() bool {
			j := c.job(b, id)
			return j != nil && j.Attempt > 0
		})
		total += time.Since(start)
		b.StopTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-submit-to-start")
}

// BenchmarkIdleCostOfABurstyWorkload runs three bursts of short jobs with
// pauses between them and reports what the instances cost and how much of
// it was idle, for a short and a long idle timeout.
func BenchmarkIdleCostOfABurstyWorkload(b *testing.B) {
	for _, idle := range []time.Duration{500 * time.Millisecond, 3 * time.Second} {
		b.Run("idle="+idle.String(), func(b *testing.B) {
			c := startScaled(b, []sim.PoolConfig{instantPool()}, control.AutoscalerConfig{Interval: 100 * time.Millisecond,
				Defaults: control.PoolLimits{Max: 2, Slots: 2, IdleTimeout: idle}}, false)
			since := time.Now()
			b.ResetTimer()
			for i := range b.N {
				for burst := range 3 {
					var ids []string
					for k := range 4 {
						id := c.submit(b, fmt.Sprintf("name: r%d-b%d-%d\ncommand: [sleep, \"0.3\"]\n", i, burst, k))
						ids = append(ids, id.String())
					}
					queuetest.Eventually(b, 60*time.Second, "the burst to finish", func() bool {
						jobs, err := c.s.List(context.Background(), queue.ListFilter{State: queue.StateSucceeded, Limit: 1000})
						return err == nil && len(jobs) >= (i*3+burst+1)*4
					})
					time.Sleep(2 * time.Second)
				}
				queuetest.Eventually(b, 30*time.Second, "the pool back at zero", func() bool { return len(c.live(b)) == 0 })
			}
			b.StopTimer()
			r, err := control.Spend(context.Background(), c.s, since.Add(-time.Minute), time.Now())
			if err != nil || len(r.Totals) != 1 {
				b.Fatalf("spend: %+v %v", r, err)
			}
			tot := r.Totals[0]
			b.ReportMetric(float64(tot.Micros)/float64(b.N), "cost-µEUR/op")
			b.ReportMetric(float64(tot.IdleMicros)/float64(b.N), "idle-µEUR/op")
			b.ReportMetric(100*float64(tot.IdleMicros)/float64(max(tot.Micros, 1)), "idle-%")
		})
	}
}
