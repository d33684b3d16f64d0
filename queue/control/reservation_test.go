package control_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// tenCentPlacer places on one on-demand pool at 0.10 EUR/h with a 1 EUR
// monthly cap on project vision, charging budgets as `gpuq server` does.
func tenCentPlacer(t *testing.T, charged func(context.Context, string, time.Time) (map[string]int64, error)) *control.PolicyPlacer {
	t.Helper()
	provider, err := local.New([]local.PoolConfig{
		{Pool: "cheap", Region: "eu-central-1", Country: "DE", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: "on-demand", PricePerHour: "0.10"},
	})
	if err != nil {
		t.Fatal(err)
	}
	rules := policy.Rules{Budgets: []policy.Budget{{Project: "vision", Period: "month", Cap: policy.Money{Micros: 1_000_000, Currency: "EUR"}}}}
	return &control.PolicyPlacer{Sources: []adapters.OfferSource{provider}, Rules: rules, Spend: charged}
}

// Each placed job reserves its estimate against its project's budget when
// its placement is committed, so 30 jobs of an hour at 0.10 EUR/h against a
// 1 EUR cap place at most 10, whether they arrive in one batch or many; the
// rest are rejected naming the budget. A finished job releases what it did
// not spend, and the next job fits again.
func TestThirtyJobsAtTenCentsAgainstAOneEuroCapPlaceAtMostTen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	placer := tenCentPlacer(t, s.Charged)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&control.Scheduler{JS: n.JS, Store: s, Placer: placer}).Run(runCtx) //nolint:errcheck // ends with ctx
	}()
	t.Cleanup(func() { cancel(); <-done })

	var ids []uuid.UUID
	for i := range 30 {
		sub, err := queue.Submit(ctx, n.JS, mustSpec(t, fmt.Sprintf("name: j%d\nproject: vision\ncommand: [/bin/true]\nexpected_duration: 1h\n", i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sub.JobID)
	}
	states := func() map[queue.JobState][]*queue.Job {
		out := map[queue.JobState][]*queue.Job{}
		for _, id := range ids {
			j, err := s.Job(ctx, id)
			if err != nil {
				return nil
			}
			out[j.State] = append(out[j.State], j)
		}
		return out
	}
	queuetest.Eventually(t, 30*time.Second, "every job to be placed or rejected", func() bool {
		st := states()
		return st != nil && len(st[queue.StatePlaced])+len(st[queue.StateRejected]) == len(ids)
	})
	st := states()
	if len(st[queue.StatePlaced]) != 10 || len(st[queue.StateRejected]) != 20 {
		t.Fatalf("placed %d and rejected %d of 30 jobs at 0.10 EUR against a 1 EUR cap; want 10 and 20",
			len(st[queue.StatePlaced]), len(st[queue.StateRejected]))
	}
	for _, j := range st[queue.StateRejected] {
		if !strings.Contains(j.Reason, "budget") {
			t.Fatalf("job %s rejected with %q; want the budget named", j.ID, j.Reason)
		}
	}
	first := st[queue.StatePlaced][0]
	p, err := s.LatestPlacement(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.EstimateMicros != 100_000 || p.EstimateCurrency != "EUR" || p.Provider != "local" {
		t.Fatalf("the placement must record its estimate and provider: %+v", p)
	}

	// The first job runs for a moment and succeeds: it has spent almost
	// nothing, so nearly all of its 0.10 EUR comes back. Nearly, not all:
	// what it accrued stays spent, so the next job that fits is one of
	// half an hour (0.05 EUR), and an hour's job after it does not.
	c, err := s.Claim(ctx, queue.ClaimRequest{JobID: first.ID, PlacementVersion: 1, Lease: time.Minute, WorkerID: "w", Host: "h", PID: 1, Pool: "cheap"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Succeed(ctx, first.ID, c.Job.Attempt, nil); err != nil {
		t.Fatal(err)
	}
	again, err := queue.Submit(ctx, n.JS, mustSpec(t, "name: again\nproject: vision\ncommand: [/bin/true]\nexpected_duration: 30m\n"))
	if err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, 20*time.Second, "the job after a release to be placed", func() bool {
		j, err := s.Job(ctx, again.JobID)
		return err == nil && j.State == queue.StatePlaced
	})
	one, err := queue.Submit(ctx, n.JS, mustSpec(t, "name: one-more\nproject: vision\ncommand: [/bin/true]\nexpected_duration: 1h\n"))
	if err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, 20*time.Second, "the job past the cap to be rejected", func() bool {
		j, err := s.Job(ctx, one.JobID)
		return err == nil && j.State == queue.StateRejected
	})
}

// A job that says nothing of its duration is charged the default admission
// duration (an hour), and one that says 1s is charged at least a minute.
func TestShortAndUnsizedJobsAreChargedTheConfiguredMinimumAndDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	placer := tenCentPlacer(t, nil)
	for _, c := range []struct {
		spec string
		want int64
	}{
		{"command: [/bin/true]\n", 100_000},                             // 1h at 0.10 EUR/h
		{"command: [/bin/true]\nexpected_duration: 1s\n", 1_666},        // 1 min
		{"command: [/bin/true]\nexpected_duration: 30m\n", 50_000},      // as said
		{"command: [/bin/true]\nexpected_duration: 2h\n", 200_000},      // as said
		{"command: [/bin/true]\nexpected_duration: 59s\n", 1_666},       // 1 min
		{"command: [/bin/true]\nexpected_duration: 1m30s\n", 2_500},     // as said
		{"command: [/bin/true]\nexpected_duration: 10m\n", 16_666},      // as said
		{"command: [/bin/true]\nexpected_duration: 1ms\n", 1_666},       // 1 min
		{"command: [/bin/true]\nexpected_duration: 6m\n", 10_000},       // as said
		{"command: [/bin/true]\nexpected_duration: 100h\n", 10_000_000}, // as said
	} {
		job := &queue.Job{ID: uuid.New(), Spec: mustSpec(t, c.spec), SubmittedAt: time.Now()}
		job.Project = job.Spec.Project
		p, err := placer.Place(ctx, job, nil)
		if err != nil {
			t.Fatalf("%q: %v", c.spec, err)
		}
		if p.EstimateMicros != c.want || p.EstimateCurrency != "EUR" {
			t.Errorf("%q is estimated at %d %s; want %d EUR micros", c.spec, p.EstimateMicros, p.EstimateCurrency, c.want)
		}
	}
	// The minimum is configurable.
	placer.Rules.MinChargedDuration = 10 * time.Minute
	p, err := placer.Place(ctx, &queue.Job{ID: uuid.New(), Spec: mustSpec(t, "command: [/bin/true]\nexpected_duration: 1s\n")}, nil)
	if err != nil || p.EstimateMicros != 16_666 {
		t.Fatalf("with min_charged_duration 10m a 1s job must be charged 10 minutes: %+v %v", p, err)
	}
}
