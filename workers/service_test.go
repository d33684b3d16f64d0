package workers_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/workers"
)

// flakyService answers every request of op on pool but drops the first
// `drop` of them, as a server killed after taking them would.
func flakyService(t *testing.T, nc *nats.Conn, pool, op string, drop int32) *atomic.Int32 {
	t.Helper()
	var seen atomic.Int32
	sub, err := nc.Subscribe(queue.WorkerServiceSubject(pool, op), func(m *nats.Msg) {
		if seen.Add(1) <= drop {
			return
		}
		var req queue.WorkerRequest
		reply := queue.WorkerReply{}
		if err := json.Unmarshal(m.Data, &req); err != nil || req.Pool != pool {
			reply.Error = &queue.WireError{Kind: queue.WireBadRequest, Message: "bad request"}
		}
		body, _ := json.Marshal(reply)
		m.Respond(body) //nolint:errcheck // the test sees a timeout otherwise
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() }) //nolint:errcheck // test cleanup
	return &seen
}

func TestServiceRecordsRepeatsOnlyRequestsThatCannotApplyTwice(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	ctx := context.Background()
	r := workers.NewServiceRecords(n.NC, "p", "w1")
	r.Timeout = 200 * time.Millisecond
	heartbeats := flakyService(t, n.NC, "p", queue.WorkerOpHeartbeat, 1)
	if err := r.Heartbeat(ctx, uuid.New(), 1, time.Minute); err != nil {
		t.Fatalf("a heartbeat whose first reply was lost: %v", err)
	}
	if got := heartbeats.Load(); got != 2 {
		t.Fatalf("want the heartbeat sent twice, got %d", got)
	}
	notices := flakyService(t, n.NC, "p", queue.WorkerOpNotice, 1)
	if err := r.RecordNotice(ctx, uuid.New(), 1, "preemption notice", time.Minute); !errors.Is(err, workers.ErrNoControlPlane) {
		t.Fatalf("a notice whose reply was lost: want ErrNoControlPlane, got %v", err)
	}
	if got := notices.Load(); got != 1 {
		t.Fatalf("a notice may not be repeated (it would be recorded twice), sent %d times", got)
	}
	// A claim is repeated only when every claim carries a claim id.
	claims := flakyService(t, n.NC, "p", queue.WorkerOpClaim, 100)
	req := queue.ClaimRequest{JobID: uuid.New(), PlacementVersion: 1, Lease: time.Minute, Pool: "p"}
	if _, err := r.ClaimMany(ctx, []queue.ClaimRequest{req}); !errors.Is(err, workers.ErrNoControlPlane) || claims.Load() != 1 {
		t.Fatalf("a claim without a claim id: want one try, got %d (%v)", claims.Load(), err)
	}
	req.ClaimID = uuid.New()
	if _, err := r.ClaimMany(ctx, []queue.ClaimRequest{req}); !errors.Is(err, workers.ErrNoControlPlane) || claims.Load() != 4 {
		t.Fatalf("a claim with a claim id: want three tries, got %d (%v)", claims.Load()-1, err)
	}
}
