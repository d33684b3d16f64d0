package control_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/adapters/sim"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// A pool's minimum is kept with no job at all: its workers, idle past the
// idle timeout, are not released, they turn ready from their beats alone,
// and one the provider takes away is launched again.
func TestPoolMinimumIsKeptWithoutWorkAndRelaunchedWhenAnInstanceIsLost(t *testing.T) {
	t.Parallel()
	const idle = 500 * time.Millisecond
	pool := simPool("od", "DE", "on-demand", "0.10")
	pool.BootDelay = time.Millisecond
	c := startScaled(t, []sim.PoolConfig{pool}, control.AutoscalerConfig{Interval: 200 * time.Millisecond,
		Defaults: control.PoolLimits{Min: 2, Max: 4, IdleTimeout: idle, BootTimeout: 30 * time.Second}}, false)
	ctx := context.Background()
	ready := func() []*queue.Instance {
		ins, err := c.s.Instances(ctx, "od", queue.InstanceReady)
		if err != nil {
			t.Fatal(err)
		}
		return ins
	}
	queuetest.Eventually(t, 30*time.Second, "the pool's minimum of 2 ready instances", func() bool { return len(ready()) == 2 })
	for _, in := range ready() {
		// No job ran: the worker's beats alone said it was up.
		if in.WorkerSeenAt == nil || in.Project != "" {
			t.Fatalf("instance %s ready with its worker seen at %v, for project %q; want seen, for no project", in.ID, in.WorkerSeenAt, in.Project)
		}
	}
	time.Sleep(4 * idle)
	if live, up := c.live(t), ready(); len(live) != 2 || len(up) != 2 || c.cloud.Created() != 2 {
		t.Fatalf("after %s idle: %d live, %d ready, %d rented; want the minimum of 2 kept", 4*idle, len(live), len(up), c.cloud.Created())
	}

	lost := ready()[0]
	if err := c.provider.Terminate(ctx, lost.ProviderID); err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, 30*time.Second, "the lost instance recorded and another one ready", func() bool {
		in, err := c.s.Instance(ctx, lost.ID)
		if err != nil {
			t.Fatal(err)
		}
		return !in.State.Live() && len(ready()) == 2
	})
	if in, _ := c.s.Instance(ctx, lost.ID); in.State != queue.InstancePreempted {
		t.Fatalf("the lost instance ended %s (%q), want preempted", in.State, in.Reason)
	}
	if n := c.cloud.Created(); n != 3 {
		t.Fatalf("the cloud rented %d machines, want 3 (the minimum of 2, then one for the lost one)", n)
	}
	if live := c.live(t); len(live) != 2 {
		t.Fatalf("%d live instances, want the minimum of 2", len(live))
	}
}

// placedBurst submits one job per project named and waits until each is
// placed.
func placedBurst(t *testing.T, c *scaled, projects ...string) {
	t.Helper()
	var ids []uuid.UUID
	for i, project := range projects {
		ids = append(ids, c.submit(t, fmt.Sprintf("name: b%d\nproject: %s\ncommand: [/bin/true]\n", i, project)))
	}
	queuetest.Eventually(t, 30*time.Second, "the jobs to be placed", func() bool {
		for _, id := range ids {
			if j := c.job(t, id); j == nil || j.State != queue.StatePlaced {
				return false
			}
		}
		return true
	})
}

// passer is an autoscaler over c's cloud passed by hand.
func passer(c *scaled, cfg control.AutoscalerConfig) *control.Autoscaler {
	return &control.Autoscaler{Providers: []control.InstanceProvider{c.provider}, Store: c.s, Workers: c.s, JS: c.n.JS,
		Placer: c.placer, Config: cfg, Logger: c.auto.Logger,
		Boot: control.BootTemplate{NATSURL: c.n.Server.URL(), Credentials: control.IssuedCredentials{Issuer: c.n.Server.Issuer}}}
}

func passes(t *testing.T, a *control.Autoscaler, n int) {
	t.Helper()
	for range n {
		if err := a.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// repeat is n copies of s.
func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// A burst of demand launches no more than max_launches_per_minute within a
// minute, however many passes see it; a minute on, the pool launches again.
func TestLaunchesPerMinuteBoundHoldsUnderABurstOfDemand(t *testing.T) {
	t.Parallel()
	pool := simPool("od", "DE", "on-demand", "0.10")
	pool.BootDelay = 24 * time.Hour // no worker: the test is about launches
	c := startScaled(t, []sim.PoolConfig{pool}, control.AutoscalerConfig{}, true)
	placedBurst(t, c, repeat("p", 12)...)
	auto := passer(c, control.AutoscalerConfig{Defaults: control.PoolLimits{Max: 10, MaxLaunchesPerMinute: 3, BootTimeout: time.Hour}})
	passes(t, auto, 4)
	if live, n := len(c.live(t)), c.cloud.Created(); live != 3 || n != 3 {
		t.Fatalf("after four passes over 12 waiting jobs: %d live, %d rented; want 3 (max_launches_per_minute)", live, n)
	}
	// A minute later the launches of the first minute no longer count.
	auto.Now = func() time.Time { return time.Now().Add(61 * time.Second) }
	passes(t, auto, 1)
	if live, n := len(c.live(t)), c.cloud.Created(); live != 6 || n != 6 {
		t.Fatalf("a minute on: %d live, %d rented; want 6 (3 more)", live, n)
	}
}

// A pool's max_spend_per_hour stops launches once one more instance would
// take its live instances' summed hourly price over it; an instance that
// ends frees its share for another.
func TestPoolSpendBoundStopsLaunchesAtTheLiveInstancesHourlyPrice(t *testing.T) {
	t.Parallel()
	pool := simPool("od", "DE", "on-demand", "0.10")
	pool.BootDelay = 24 * time.Hour // no worker: the test is about launches
	c := startScaled(t, []sim.PoolConfig{pool}, control.AutoscalerConfig{}, true)
	placedBurst(t, c, repeat("p", 10)...)
	// 3 × 0.10 EUR reaches the bound; a fourth would go over it.
	auto := passer(c, control.AutoscalerConfig{Defaults: control.PoolLimits{Max: 10, MaxSpendPerHour: "0.30 EUR", BootTimeout: time.Hour}})
	passes(t, auto, 3)
	live := c.live(t)
	if len(live) != 3 || c.cloud.Created() != 3 {
		t.Fatalf("after three passes over 10 waiting jobs: %d live, %d rented; want 3 (0.30 EUR/h at 0.10 each)", len(live), c.cloud.Created())
	}
	if err := c.provider.Terminate(context.Background(), live[0].ProviderID); err != nil {
		t.Fatal(err)
	}
	passes(t, auto, 2)
	if live, n := len(c.live(t)), c.cloud.Created(); live != 3 || n != 4 {
		t.Fatalf("after one instance ended: %d live, %d rented; want 3 live, 4 rented", live, n)
	}
}

// A project's max_spend_per_hour holds back launches for its jobs once its
// live instances' hourly price would go over it, while another project's
// jobs in the same pool still get machines.
func TestProjectSpendBoundHoldsBackThatProjectsLaunches(t *testing.T) {
	t.Parallel()
	pool := simPool("od", "DE", "on-demand", "0.10")
	pool.BootDelay = 24 * time.Hour // no worker: the test is about launches
	c := startScaled(t, []sim.PoolConfig{pool}, control.AutoscalerConfig{}, true)
	placedBurst(t, c, append(repeat("capped", 5), "free", "free")...)
	auto := passer(c, control.AutoscalerConfig{Defaults: control.PoolLimits{Max: 10, BootTimeout: time.Hour},
		Projects: map[string]control.ProjectLimits{"capped": {MaxSpendPerHour: "0.25 EUR"}}})
	passes(t, auto, 3)
	perProject := map[string]int{}
	for _, in := range c.live(t) {
		perProject[in.Project]++
	}
	if perProject["capped"] != 2 || perProject["free"] != 2 || len(perProject) != 2 {
		t.Fatalf("live instances per project %v, want capped 2 (0.25 EUR/h at 0.10 each), free 2", perProject)
	}
}

// With no job to place, each autoscaler pass still observes every pool
// offered, so that the pools' history (and the runs the spot strategy
// models their outages from) goes on while the queue is idle.
func TestAutoscalerPassesObserveEveryPoolWhileNoJobIsPlaced(t *testing.T) {
	t.Parallel()
	c := startScaled(t, []sim.PoolConfig{simPool("od", "DE", "on-demand", "0.10"), simPool("sp", "DE", "spot", "0.03")},
		control.AutoscalerConfig{}, true)
	auto := passer(c, control.AutoscalerConfig{})
	auto.Pools = c.s
	t0 := time.Now().Add(time.Hour) // no placer has observed these slots
	for i := range 3 {
		auto.Now = func() time.Time { return t0.Add(time.Duration(i) * 10 * time.Second) }
		passes(t, auto, 1)
	}
	sums, err := c.s.PoolSummaries(context.Background(), t0.Add(-10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, pool := range []string{"od", "sp"} {
		if b := sums[pool]; b.Ticks != 3 || b.UpTicks != 3 || b.Currency != "EUR" {
			t.Errorf("pool %s after three passes 10 s apart: %+v, want 3 ticks up, priced in EUR", pool, b)
		}
	}
}
