package control_test

import (
	"context"
	"errors"
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

// priceyPool offers one pool at 3600 EUR/h, one euro a second, so that a
// few seconds of running exhaust a small budget.
func priceyPool(t *testing.T) *local.Provider {
	t.Helper()
	provider, err := local.New([]local.PoolConfig{
		{Pool: "pricey", Region: "eu-central-1", Country: "DE", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: "on-demand", PricePerHour: "3600"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return provider
}

// visionBudget is project vision's monthly budget of eur euros. A 1 s job
// is charged a second, not the default minute, so that it fits the budget
// until spend has accrued.
func visionBudget(eur int64) policy.Rules {
	return policy.Rules{MinChargedDuration: time.Second,
		Budgets: []policy.Budget{{Project: "vision", Period: "month", Cap: policy.Money{Micros: eur * 1_000_000, Currency: "EUR"}}}}
}

func TestProjectBudgetIsChargedWithSpendAsItAccrues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	rules := visionBudget(10)
	placer := &control.PolicyPlacer{Sources: []adapters.OfferSource{priceyPool(t)}, Rules: rules, Spend: s.Spend}
	newJob := func(project string) *queue.Job {
		spec := mustSpec(t, "project: "+project+"\ncommand: [/bin/true]\nexpected_duration: 1s\n")
		jobs, err := s.RecordJobs(ctx, []queue.NewJob{{ID: uuid.New(), Spec: spec}})
		if err != nil {
			t.Fatal(err)
		}
		return jobs[0]
	}
	first := newJob("vision")
	p, err := placer.Place(ctx, first, nil)
	if err != nil {
		t.Fatalf("a job within budget must be placed: %v", err)
	}
	if p.PriceMicros != 3600_000_000 || p.Currency != "EUR" {
		t.Fatalf("the placement must carry the chosen price: %+v", p)
	}
	p.Version = 1
	if _, err := s.RecordPlacements(ctx, []queue.PlacedJob{{JobID: first.ID, Placement: p}}); err != nil {
		t.Fatal(err)
	}
	c, err := s.Claim(ctx, queue.ClaimRequest{JobID: first.ID, PlacementVersion: 1, Lease: time.Minute, WorkerID: "w", Host: "h", PID: 1, Pool: "pricey"})
	if err != nil {
		t.Fatal(err)
	}
	// Twelve seconds of running, known from the last heartbeat while the
	// attempt still runs.
	if _, err := s.DB.Exec(`UPDATE attempts SET started_at = now() - interval '12 seconds'`); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, first.ID, c.Job.Attempt, time.Minute); err != nil {
		t.Fatal(err)
	}
	spend, err := s.Spend(ctx, "vision", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if eur := spend["EUR"]; eur < 11_500_000 || eur > 13_000_000 {
		t.Fatalf("want about 12 EUR spent, got %d micros", eur)
	}
	_, err = placer.Place(ctx, newJob("vision"), nil)
	var rej *queue.RejectionError
	if !errors.As(err, &rej) || !strings.Contains(rej.Reason, "budget") {
		t.Fatalf("a job over the project's remaining budget must be rejected with the reason, got %v", err)
	}
	if _, err := placer.Place(ctx, newJob("audio"), nil); err != nil {
		t.Fatalf("another project's budget is untouched: %v", err)
	}
}
