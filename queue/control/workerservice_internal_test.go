package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
)

// claimRecorder is a WorkerStore that answers claims with the job each
// claim names and records the size of every statement's batch.
type claimRecorder struct {
	WorkerStore
	batches []int
	// fail fails every statement; failOn, every statement claiming that job.
	fail   error
	failOn uuid.UUID
}

func (r *claimRecorder) ClaimMany(_ context.Context, reqs []queue.ClaimRequest) ([]queue.ClaimResult, error) {
	r.batches = append(r.batches, len(reqs))
	if r.fail != nil {
		return nil, r.fail
	}
	for _, c := range reqs {
		if c.JobID == r.failOn {
			return nil, fmt.Errorf("claiming job %s: invalid input", c.JobID)
		}
	}
	out := make([]queue.ClaimResult, len(reqs))
	for i, c := range reqs {
		out[i].Claimed = &queue.Claimed{Job: &queue.Job{ID: c.JobID, Pool: c.Pool}}
	}
	return out, nil
}

func TestClaimMergedSharesStatementsUpToTheirBoundAndSplitsTheResults(t *testing.T) {
	rec := &claimRecorder{}
	s := &WorkerService{Store: rec, Logger: slog.New(slog.DiscardHandler)}
	sizes := []int{3, 1, maxClaimStatement - 4, 200, 5, queue.MaxWorkerBatch}
	requests := make([][]queue.ClaimRequest, len(sizes))
	for i, n := range sizes {
		for range n {
			requests[i] = append(requests[i], queue.ClaimRequest{JobID: uuid.New(), Pool: string(rune('a' + i))})
		}
	}
	out, err := s.claimMerged(context.Background(), requests)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{maxClaimStatement, 200 + 5 + queue.MaxWorkerBatch}; !slices.Equal(rec.batches, want) {
		t.Fatalf("statements of %v claims, want %v", rec.batches, want)
	}
	for i, req := range requests {
		if len(out[i]) != len(req) {
			t.Fatalf("request %d: %d results for %d claims", i, len(out[i]), len(req))
		}
		for k, c := range req {
			if got := out[i][k].Claimed.Job; got.ID != c.JobID || got.Pool != c.Pool {
				t.Fatalf("request %d, claim %d: the result is job %s of pool %s, want %s of %s", i, k, got.ID, got.Pool, c.JobID, c.Pool)
			}
		}
		// A request's results must not reach into the next request's.
		if cap(out[i]) != len(out[i]) {
			t.Fatalf("request %d: results have capacity %d past their %d", i, cap(out[i]), len(out[i]))
		}
	}
	// A statement that fails on one request's claim is tried again request
	// by request: only that request's claims fail.
	rec.failOn, rec.batches = requests[1][0].JobID, nil
	out, err = s.claimMerged(context.Background(), requests[:3])
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{maxClaimStatement, 3, 1, maxClaimStatement - 4}; !slices.Equal(rec.batches, want) {
		t.Fatalf("statements of %v claims, want %v", rec.batches, want)
	}
	for i := range 3 {
		for k, r := range out[i] {
			if failed := r.Err != nil; failed != (i == 1) || (r.Claimed != nil) == failed {
				t.Fatalf("request %d, claim %d: %+v", i, k, r)
			}
		}
	}
	// A request alone in its statement fails with the statement.
	rec.fail, rec.failOn, rec.batches = errors.New("connection lost"), uuid.Nil, nil
	if _, err := s.claimMerged(context.Background(), requests[:1]); !errors.Is(err, rec.fail) || len(rec.batches) != 1 {
		t.Fatalf("a failed statement: want its error after one statement, got %v after %d", err, len(rec.batches))
	}
}
