package store_test

import (
	"context"
	"testing"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

func TestNodeRecordCountsCanariesAndKeepsQuarantine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	record := func(ok, quarantine bool) *queue.Node {
		t.Helper()
		id, n, err := s.RecordCanary(ctx, queue.CanaryRecord{NodeID: "i-1", Pool: "p", Host: "h", OK: ok, Summary: "cuda: expected ≥ 12.4, found 12.2", Quarantine: quarantine, Reason: "too many failures"})
		if err != nil || id == 0 {
			t.Fatalf("recording: id %d, %v", id, err)
		}
		return n
	}
	record(false, false)
	if n := record(false, false); n.ConsecutiveFailures != 2 || n.CanaryFailures != 2 {
		t.Fatalf("two failures: %+v", n)
	}
	if n := record(true, false); n.ConsecutiveFailures != 0 || n.CanaryFailures != 2 || n.CanaryRuns != 3 || *n.LastCanaryOK != true {
		t.Fatalf("a pass resets the run of failures, not the totals: %+v", n)
	}
	if n := record(false, true); n.QuarantinedAt == nil || n.QuarantineReason != "too many failures" {
		t.Fatalf("quarantine not recorded: %+v", n)
	}
	if n := record(true, false); n.QuarantinedAt == nil {
		t.Fatal("a quarantine stays until an operator lifts it")
	}
	n, err := s.Node(ctx, "i-1")
	if err != nil || n.FailureRate() != 0.6 {
		t.Fatalf("failure rate: want 0.6, got %v (%v)", n.FailureRate(), err)
	}
}
