package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

func TestInstanceChangesAreGuardedByStateAndEachIsAnEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	if _, err := s.RecordInstance(ctx, queue.NewInstance{ID: "i-1", Provider: "sim", Pool: "p", ClientToken: "i-1", Slots: 2,
		PriceMicros: 360_000, Currency: "EUR", Billing: queue.BillPerSecond, Message: "2 jobs waiting"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordInstance(ctx, queue.NewInstance{ID: "i-1", Provider: "sim", Pool: "p", ClientToken: "i-1", Slots: 2,
		Currency: "EUR", Billing: queue.BillPerSecond}); err == nil {
		t.Fatal("recording the same instance twice succeeded")
	}
	launched := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	got, err := s.ChangeInstance(ctx, queue.InstanceChange{ID: "i-1", From: []queue.InstanceState{queue.InstanceRequested},
		To: queue.InstancePending, ProviderID: "sim-000001", LaunchedAt: &launched})
	if err != nil {
		t.Fatal(err)
	}
	if got.ProviderID != "sim-000001" || got.LaunchedAt == nil || !got.LaunchedAt.Equal(launched) {
		t.Fatalf("after launch: %+v", got)
	}
	// A repeated launch answer finds the instance moved on.
	if _, err := s.ChangeInstance(ctx, queue.InstanceChange{ID: "i-1", From: []queue.InstanceState{queue.InstanceRequested},
		To: queue.InstancePending}); !errors.Is(err, queue.ErrInstanceMoved) {
		t.Fatalf("repeated change: got %v, want ErrInstanceMoved", err)
	}
	got, err = s.ChangeInstance(ctx, queue.InstanceChange{ID: "i-1", From: []queue.InstanceState{queue.InstancePending, queue.InstanceReady},
		To: queue.InstanceTerminated, Reason: "idle for 1m0s"})
	if err != nil {
		t.Fatal(err)
	}
	if got.EndedAt == nil || got.EndedAt.Before(launched) || got.Reason != "idle for 1m0s" {
		t.Fatalf("after termination: %+v", got)
	}
	evs, err := s.InstanceEvents(ctx, "i-1")
	if err != nil {
		t.Fatal(err)
	}
	var states []queue.InstanceState
	for _, e := range evs {
		states = append(states, e.State)
	}
	if len(states) != 3 || states[0] != queue.InstanceRequested || states[1] != queue.InstancePending || states[2] != queue.InstanceTerminated {
		t.Fatalf("events: %v", states)
	}
	live, err := s.LiveInstances(ctx)
	if err != nil || len(live) != 0 {
		t.Fatalf("live instances after termination: %v %v", live, err)
	}
}

func TestWorkerActivityCountsTheInstancesRunningAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	if _, err := s.RecordInstance(ctx, queue.NewInstance{ID: "node-a", Provider: "sim", Pool: "p", ClientToken: "node-a", Slots: 1,
		Currency: "EUR", Billing: queue.BillPerSecond}); err != nil {
		t.Fatal(err)
	}
	id := placedJob(t, s)
	if _, err := s.Claim(ctx, queue.ClaimRequest{JobID: id, PlacementVersion: 1, Lease: time.Minute, WorkerID: "w", Host: "h", PID: 1, Pool: "p", NodeID: "node-a"}); err != nil {
		t.Fatal(err)
	}
	demand, err := s.PoolDemand(ctx)
	if err != nil || len(demand) != 1 || demand[0].Running != 1 || demand[0].Waiting != 0 {
		t.Fatalf("demand: %+v %v", demand, err)
	}
	act, err := s.WorkerActivity(ctx, []string{"node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if a := act["node-a"]; a.Busy != 1 {
		t.Fatalf("activity while running: %+v", a)
	}
	if err := s.Succeed(ctx, id, 1, nil); err != nil {
		t.Fatal(err)
	}
	act, err = s.WorkerActivity(ctx, []string{"node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if a := act["node-a"]; a.Busy != 0 || time.Since(a.LastActive) > time.Minute {
		t.Fatalf("activity after success: %+v", a)
	}
}
