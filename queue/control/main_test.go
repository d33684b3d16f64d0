package control_test

import (
	"context"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/sql/pgtest"
)

func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	removeGpuqBinary()
	os.Exit(code)
}

func mustSpec(t *testing.T, yaml string) *queue.Spec {
	t.Helper()
	s, err := queue.ParseSpec([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// placedJob records a job and its first placement, ready to be claimed.
func placedJob(t *testing.T, s *store.Store) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id := uuid.New()
	if _, err := s.RecordJobs(ctx, []queue.NewJob{{ID: id, Spec: mustSpec(t, "command: [/bin/true]")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordPlacements(ctx, []queue.PlacedJob{{JobID: id, Placement: queue.Placement{Version: 1, Pool: "p", Region: "r"}}}); err != nil {
		t.Fatal(err)
	}
	return id
}

// scheduling starts NATS, a store and a scheduler that places jobs on one
// local spot pool in eu-central-1, for the test's life; the context ends
// with it.
func scheduling(t *testing.T, pool string) (*queuetest.NATS, *store.Store, *control.PolicyPlacer, context.Context) {
	t.Helper()
	n := queuetest.StartNATS(t)
	st, _ := queuetest.Store(t, n)
	provider, err := local.New([]local.PoolConfig{
		{Pool: pool, Region: "eu-central-1", Country: "DE", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: "spot", PricePerHour: "0.03"},
	})
	if err != nil {
		t.Fatal(err)
	}
	placer := &control.PolicyPlacer{Sources: []adapters.OfferSource{provider}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go (&control.Scheduler{JS: n.JS, Store: st, Placer: placer}).Run(ctx) //nolint:errcheck // ends with ctx
	return n, st, placer, ctx
}
