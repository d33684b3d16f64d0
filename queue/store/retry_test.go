package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// A retried job goes back to placed under its next placement with its
// counts at zero, keeps its attempts and checkpoints, and is claimed as its
// next attempt; its trail marks the end it was retried from as superseded.
// A job that has not finished, one that succeeded, and one whose state
// changed since it was read are refused, and a budget guard that no longer
// holds refuses the retry; each refusal changes nothing.
func TestRetryPlacesAFinishedJobAgainUnderItsNextPlacementOrChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	id := runningJob(t, s)
	if _, err := s.RecordCheckpoint(ctx, id, 1, queue.ArchiveRecord{Bytes: 10, SHA256: strings.Repeat("a", 64), Region: "r", StoreURI: "nats-os://ckpt/" + id.String() + "/1"}); err != nil {
		t.Fatal(err)
	}
	exit := 3
	if err := s.Fail(ctx, id, 1, queue.OutcomeFailed, &exit, "exited with status 3"); err != nil {
		t.Fatal(err)
	}
	failed, err := s.Job(ctx, id)
	if err != nil || failed.State != queue.StateFailed || failed.Errors != 1 || failed.FinalizedAt == nil {
		t.Fatalf("failed job: %+v, %v", failed, err)
	}

	next := queue.Placement{Pool: "q", Region: "r2"}
	if err := s.Retry(ctx, failed, next, "retried by test", false); err != nil {
		t.Fatal(err)
	}
	job, err := s.Job(ctx, id)
	switch {
	case err != nil:
		t.Fatal(err)
	case job.State != queue.StatePlaced || job.PlacementVersion != 2 || job.Pool != "q":
		t.Fatalf("retried job: want placed on q under placement 2, got %s on %s under %d", job.State, job.Pool, job.PlacementVersion)
	case job.Errors != 0 || job.Preemptions != 0 || job.ExitCode != nil || job.FinalizedAt != nil || job.Attempt != 1:
		t.Fatalf("retried job: want its counts at zero, no exit code, not finalised, attempt 1 so far; got %+v", job)
	}
	p, err := s.LatestPlacement(ctx, id)
	if err != nil || p.Version != 2 || p.Pool != "q" || p.Region != "r2" {
		t.Fatalf("latest placement: %+v, %v", p, err)
	}
	events, err := s.EventsOf(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, ev := range events {
		s := string(ev.State)
		if ev.Superseded {
			s += "(superseded)"
		}
		states = append(states, s)
	}
	if got := strings.Join(states, " "); got != "pending placed running failed(superseded) pending placed" {
		t.Fatalf("trail: %s", got)
	}
	if ev := events[4]; ev.Message != "retried by test" || ev.Attempt != 1 {
		t.Fatalf("the retry's event: %+v", ev)
	}
	// The old placement's message is stale; the new one claims attempt 2,
	// which resumes from the checkpoint.
	var nc *queue.NotClaimableError
	if _, err := claim(t, s, id, time.Minute); !errors.As(err, &nc) || !nc.Stale {
		t.Fatalf("a claim under placement 1 after the retry: want stale, got %v", err)
	}
	c, err := s.Claim(ctx, queue.ClaimRequest{JobID: id, PlacementVersion: 2, Lease: time.Minute, WorkerID: "w2", Host: "h", PID: 2, Pool: "q"})
	if err != nil || c.Job.Attempt != 2 || c.Checkpoint == nil || c.Checkpoint.Seq != 1 {
		t.Fatalf("claim under placement 2: want attempt 2 resuming checkpoint 1, got %+v, %v", c, err)
	}

	// Refused, changing nothing: a running job, a job read before it
	// changed, a succeeded job, an unknown job.
	running, _ := s.Job(ctx, id)
	var nr *queue.NotRetryableError
	if err := s.Retry(ctx, running, next, "x", false); !errors.As(err, &nr) || nr.State != queue.StateRunning {
		t.Fatalf("retrying a running job: want NotRetryableError(running), got %v", err)
	}
	if err := s.Retry(ctx, failed, next, "x", false); !errors.As(err, &nr) || nr.State != queue.StateRunning {
		t.Fatalf("retrying with a job read before it changed: want NotRetryableError(running), got %v", err)
	}
	if _, err := s.SucceedMany(ctx, []queue.AttemptRef{{JobID: id, Attempt: 2}}); err != nil {
		t.Fatal(err)
	}
	done, _ := s.Job(ctx, id)
	if err := s.Retry(ctx, done, next, "x", false); !errors.As(err, &nr) || nr.State != queue.StateSucceeded || !strings.Contains(err.Error(), "succeeds once") {
		t.Fatalf("retrying a succeeded job: want NotRetryableError(succeeded), got %v", err)
	}
	gone := *failed
	gone.ID = uuid.New()
	if err := s.Retry(ctx, &gone, next, "x", false); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("retrying an unknown job: want ErrNotFound, got %v", err)
	}
	if after, _ := s.EventsOf(ctx, id); len(after) != len(events)+2 { // the claim's running and the success
		t.Fatalf("refused retries must record nothing; trail now %+v", after)
	}

	// A cancelled job whose retry's budget guard no longer holds stays
	// cancelled.
	cancelled := placedJob(t, s)
	if err := s.Cancel(ctx, cancelled, "by test"); err != nil {
		t.Fatal(err)
	}
	cj, _ := s.Job(ctx, cancelled)
	guard := []queue.BudgetGuard{{Project: cj.Project, Since: time.Now().Add(-time.Hour), LimitMicros: 1, CostMicros: 2,
		Rates: map[string]int64{"EUR": 1_000_000}, Reason: "budget default: 0.000001 EUR a month"}}
	var rej *queue.RejectionError
	if err := s.Retry(ctx, cj, queue.Placement{Pool: "p", Region: "r", Guards: guard}, "x", false); !errors.As(err, &rej) || rej.Reason != guard[0].Reason {
		t.Fatalf("retry over budget: want the guard's rejection, got %v", err)
	}
	if after, _ := s.Job(ctx, cancelled); after.State != queue.StateCancelled || after.PlacementVersion != 1 || after.FinalizedAt == nil {
		t.Fatalf("a retry refused by its budget must change nothing, got %+v", after)
	}
	if err := s.Retry(ctx, cj, queue.Placement{Pool: "p", Region: "r"}, "x", false); err != nil {
		t.Fatalf("retrying the cancelled job within budget: %v", err)
	}

	// Two users retrying one job at once: one retry places it, the other
	// is refused.
	twice := runningJob(t, s)
	if err := s.Fail(ctx, twice, 1, queue.OutcomeFailed, &exit, "exited with status 3"); err != nil {
		t.Fatal(err)
	}
	tj, _ := s.Job(ctx, twice)
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- s.Retry(ctx, tj, queue.Placement{Pool: "p", Region: "r"}, "x", false) }()
	}
	first, second := <-errs, <-errs
	if (first == nil) == (second == nil) || !errors.As(errors.Join(first, second), &nr) || nr.State != queue.StatePlaced {
		t.Fatalf("two retries at once: want one placed and one refused (now placed), got %v and %v", first, second)
	}
	if after, _ := s.Job(ctx, twice); after.PlacementVersion != 2 {
		t.Fatalf("two retries at once placed the job under placement %d, want 2", after.PlacementVersion)
	}

	// Retried fresh: the checkpoints are dropped, the next attempt starts
	// from nothing, and the next checkpoint's number goes on from the last.
	fresh := runningJob(t, s)
	if _, err := s.RecordCheckpoint(ctx, fresh, 1, queue.ArchiveRecord{Bytes: 10, SHA256: strings.Repeat("b", 64), Region: "r", StoreURI: "nats-os://ckpt/" + fresh.String() + "/1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Fail(ctx, fresh, 1, queue.OutcomeFailed, &exit, "exited with status 3"); err != nil {
		t.Fatal(err)
	}
	fj, _ := s.Job(ctx, fresh)
	if err := s.Retry(ctx, fj, queue.Placement{Pool: "p", Region: "r"}, "x", true); err != nil {
		t.Fatal(err)
	}
	if cps, err := s.Checkpoints(ctx, fresh); err != nil || len(cps) != 0 {
		t.Fatalf("checkpoints after a fresh retry: %+v, %v", cps, err)
	}
	var garbage int
	if err := s.DB.QueryRow(`SELECT count(*) FROM checkpoint_garbage WHERE job_id = $1`, fresh).Scan(&garbage); err != nil || garbage != 1 {
		t.Fatalf("the dropped checkpoint's archive must be queued for deletion: %d, %v", garbage, err)
	}
	c, err = s.Claim(ctx, queue.ClaimRequest{JobID: fresh, PlacementVersion: 2, Lease: time.Minute, WorkerID: "w2", Host: "h", PID: 2, Pool: "p"})
	if err != nil || c.Checkpoint != nil {
		t.Fatalf("claim after a fresh retry: want no checkpoint to resume, got %+v, %v", c, err)
	}
	if seq, err := s.RecordCheckpoint(ctx, fresh, 2, queue.ArchiveRecord{Bytes: 10, SHA256: strings.Repeat("c", 64), Region: "r", StoreURI: "nats-os://ckpt/" + fresh.String() + "/2"}); err != nil || seq != 2 {
		t.Fatalf("the first checkpoint after a fresh retry: seq %d, %v; want 2", seq, err)
	}

	// Retried after its retention deleted its checkpoints: the trail says
	// it starts from nothing, and its claim finds nothing to resume.
	expired := runningJob(t, s)
	if _, err := s.RecordCheckpoint(ctx, expired, 1, queue.ArchiveRecord{Bytes: 10, SHA256: strings.Repeat("d", 64), Region: "r", StoreURI: "nats-os://ckpt/" + expired.String() + "/1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Fail(ctx, expired, 1, queue.OutcomeFailed, &exit, "exited with status 3"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB.Exec(`DELETE FROM checkpoints WHERE job_id = $1`, expired); err != nil {
		t.Fatal(err)
	}
	ej, _ := s.Job(ctx, expired)
	if err := s.Retry(ctx, ej, queue.Placement{Pool: "p", Region: "r"}, "retried", false); err != nil {
		t.Fatal(err)
	}
	trail, _ := s.EventsOf(ctx, expired)
	if msg := trail[len(trail)-2].Message; msg != "retried; its checkpoints were deleted storage.checkpoint_retention after it finished, so it starts from nothing" {
		t.Fatalf("the retry's event: %q", msg)
	}
	if c, err := s.Claim(ctx, queue.ClaimRequest{JobID: expired, PlacementVersion: 2, Lease: time.Minute, WorkerID: "w2", Host: "h", PID: 2, Pool: "p"}); err != nil || c.Checkpoint != nil {
		t.Fatalf("claim after the checkpoints' retention: want no checkpoint, got %+v, %v", c, err)
	}

	// A job rejected before any placement gets its first.
	rejected := uuid.New()
	if _, err := s.RecordJobs(ctx, []queue.NewJob{{ID: rejected, Spec: mustSpec(t, "command: [/bin/true]")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CommitPlacements(ctx, queue.Decided{Rejected: map[uuid.UUID]string{rejected: "no offer"}}); err != nil {
		t.Fatal(err)
	}
	rj, _ := s.Job(ctx, rejected)
	if rj.State != queue.StateRejected {
		t.Fatalf("rejected job: %+v", rj)
	}
	if err := s.Retry(ctx, rj, queue.Placement{Pool: "p", Region: "r"}, "x", false); err != nil {
		t.Fatalf("retrying a rejected job: %v", err)
	}
	if after, _ := s.Job(ctx, rejected); after.State != queue.StatePlaced || after.PlacementVersion != 1 || after.Reason != "" {
		t.Fatalf("a rejected job retried: want placed under placement 1, got %+v", after)
	}
}
