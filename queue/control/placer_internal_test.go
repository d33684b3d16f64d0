package control

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
)

func TestABatchReadsEachProjectsSpendOnce(t *testing.T) {
	t.Parallel()
	provider, err := local.New([]local.PoolConfig{{Pool: "p", Region: "eu-central-1", Country: "DE", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: "on-demand", PricePerHour: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	placer := &PolicyPlacer{
		Sources: []adapters.OfferSource{provider},
		Rules:   policy.Rules{Budgets: []policy.Budget{{Project: "*", Period: "month", Cap: policy.Money{Micros: 100_000_000, Currency: "EUR"}}}},
		Spend: func(context.Context, string, time.Time) (map[string]int64, error) {
			calls++
			return map[string]int64{"EUR": 1_000_000}, nil
		},
	}
	place := func(ctx context.Context, project string) {
		t.Helper()
		spec, err := queue.ParseSpec([]byte("project: " + project + "\ncommand: [/bin/true]\n"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := placer.Place(ctx, &queue.Job{ID: uuid.New(), Spec: spec, SubmittedAt: time.Now()}, nil); err != nil {
			t.Fatal(err)
		}
	}
	batch := withSpendCache(context.Background())
	for range 5 {
		place(batch, "vision")
	}
	place(batch, "audio")
	if calls != 2 {
		t.Fatalf("a batch must read each project's spend once, read it %d times", calls)
	}
	place(context.Background(), "vision")
	place(context.Background(), "vision")
	if calls != 4 {
		t.Fatalf("outside a batch every placement reads the current spend, got %d reads", calls)
	}
}
