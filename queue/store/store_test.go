package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/sql/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

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

// runningJob records a job, places it and claims it as attempt 1 with a
// lease of a minute.
func runningJob(t *testing.T, s *store.Store) uuid.UUID {
	t.Helper()
	id := placedJob(t, s)
	if _, err := claim(t, s, id, time.Minute); err != nil {
		t.Fatal(err)
	}
	return id
}

func claim(t *testing.T, s *store.Store, id uuid.UUID, lease time.Duration) (*queue.Claimed, error) {
	t.Helper()
	return s.Claim(context.Background(), queue.ClaimRequest{JobID: id, PlacementVersion: 1, Lease: lease, WorkerID: "w", Host: "h", PID: 1, Pool: "p"})
}

func expireLease(t *testing.T, s *store.Store, id uuid.UUID) {
	t.Helper()
	if _, err := s.DB.Exec(`UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
}

func TestStaleAttemptCanNeitherRecordNorComplete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	id := placedJob(t, s)
	first, err := claim(t, s, id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var nc *queue.NotClaimableError
	if _, err := claim(t, s, id, time.Hour); !errors.As(err, &nc) || nc.LeaseLeft <= 0 {
		t.Fatalf("a live lease must refuse a second claim, got %v", err)
	}
	expireLease(t, s, id)
	second, err := claim(t, s, id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if second.Job.Attempt != first.Job.Attempt+1 || second.Job.Preemptions != 1 {
		t.Fatalf("the new claim must supersede attempt %d and count it lost, got attempt %d preemptions %d", first.Job.Attempt, second.Job.Attempt, second.Job.Preemptions)
	}
	stale := first.Job.Attempt
	rec := queue.ArchiveRecord{Bytes: 1, SHA256: "x", Region: "r", StoreURI: "u"}
	if _, err := s.RecordCheckpoint(ctx, id, stale, rec); !errors.Is(err, queue.ErrFenced) {
		t.Errorf("stale checkpoint: want ErrFenced, got %v", err)
	}
	if err := s.Heartbeat(ctx, id, stale, time.Minute); !errors.Is(err, queue.ErrFenced) {
		t.Errorf("stale heartbeat: want ErrFenced, got %v", err)
	}
	if err := s.RecordNotice(ctx, id, stale, "preemption notice: x", time.Minute); !errors.Is(err, queue.ErrFenced) {
		t.Errorf("stale notice: want ErrFenced, got %v", err)
	}
	if err := s.RecordNotice(ctx, id, second.Job.Attempt, "preemption notice: x", time.Minute); err != nil {
		t.Errorf("the current attempt's notice: %v", err)
	}
	if err := s.Succeed(ctx, id, stale, nil); !errors.Is(err, queue.ErrFenced) {
		t.Errorf("stale success: want ErrFenced, got %v", err)
	}
	zero := 0
	if err := s.Succeed(ctx, id, stale, &rec); !errors.Is(err, queue.ErrFenced) {
		t.Errorf("stale outputs: want ErrFenced, got %v", err)
	}
	if err := s.Fail(ctx, id, stale, queue.OutcomeFailed, &zero, "x"); !errors.Is(err, queue.ErrFenced) {
		t.Errorf("stale failure: want ErrFenced, got %v", err)
	}
	if err := s.Requeue(ctx, id, stale, queue.OutcomePreempted, nil, "x"); !errors.Is(err, queue.ErrFenced) {
		t.Errorf("stale requeue: want ErrFenced, got %v", err)
	}
	if err := s.Succeed(ctx, id, second.Job.Attempt, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Succeed(ctx, id, second.Job.Attempt, nil); !errors.Is(err, queue.ErrFenced) {
		t.Errorf("a second completion must be refused, got %v", err)
	}
	attempts, err := s.Attempts(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 2 || attempts[0].Outcome != queue.OutcomeLost || attempts[1].Outcome != queue.OutcomeSucceeded {
		t.Fatalf("attempts: %+v", attempts)
	}
	if _, err := s.Result(ctx, id); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("the stale attempt's outputs must not be recorded, got %v", err)
	}
}

func TestCheckpointSequenceNeverGoesBackwards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	id := placedJob(t, s)
	c, err := claim(t, s, id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	seqs := make(chan int, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq, err := s.RecordCheckpoint(ctx, id, c.Job.Attempt, queue.ArchiveRecord{Bytes: 1, SHA256: "x", Region: "r", StoreURI: fmt.Sprintf("u%d", i)})
			if err != nil {
				t.Error(err)
			}
			seqs <- seq
		}()
	}
	wg.Wait()
	close(seqs)
	seen := map[int]bool{}
	for seq := range seqs {
		if seen[seq] {
			t.Fatalf("sequence %d recorded twice", seq)
		}
		seen[seq] = true
	}
	expireLease(t, s, id)
	next, err := claim(t, s, id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if next.Checkpoint == nil || next.Checkpoint.Seq != 20 {
		t.Fatalf("a new attempt must resume from the latest checkpoint (20), got %+v", next.Checkpoint)
	}
	seq, err := s.RecordCheckpoint(ctx, id, next.Job.Attempt, queue.ArchiveRecord{Bytes: 1, SHA256: "x", Region: "r", StoreURI: "u"})
	if err != nil || seq != 21 {
		t.Fatalf("want seq 21 from the new attempt, got %d, %v", seq, err)
	}
	cps, err := s.Checkpoints(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(cps); i++ {
		if cps[i].Seq <= cps[i-1].Seq {
			t.Fatalf("sequence went backwards: %d after %d", cps[i].Seq, cps[i-1].Seq)
		}
	}
}

func TestRecordJobsIsIdempotentByIDAndKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	spec := mustSpec(t, "command: [/bin/true]\nidempotency_key: cell-7\n")
	first, err := s.RecordJobs(ctx, []queue.NewJob{{ID: uuid.New(), Spec: spec}})
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.RecordJobs(ctx, []queue.NewJob{{ID: first[0].ID, Spec: spec}, {ID: uuid.New(), Spec: spec}})
	if err != nil {
		t.Fatal(err)
	}
	if again[0].ID != first[0].ID || again[1].ID != first[0].ID {
		t.Fatalf("resubmissions must return the recorded job %s, got %s and %s", first[0].ID, again[0].ID, again[1].ID)
	}
	jobs, err := s.List(ctx, queue.ListFilter{})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("want 1 job, got %d (%v)", len(jobs), err)
	}
}

func TestFinalizedAtIsSetExactlyInTerminalStates(t *testing.T) {
	t.Parallel()
	s, _ := queuetest.Store(t, nil)
	id := placedJob(t, s)
	if _, err := s.DB.Exec(`UPDATE jobs SET state = 'succeeded' WHERE id = $1`, id); err == nil {
		t.Fatal("a terminal state without finalized_at must violate the constraint")
	}
	if _, err := s.DB.Exec(`UPDATE jobs SET finalized_at = now() WHERE id = $1`, id); err == nil {
		t.Fatal("finalized_at on a placed job must violate the constraint")
	}
}

func TestCancelFinalisesOnlyUnfinishedJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	id := placedJob(t, s)
	if err := s.Cancel(ctx, id, "by test"); err != nil {
		t.Fatal(err)
	}
	var nc *queue.NotClaimableError
	if err := s.Cancel(ctx, id, "again"); !errors.As(err, &nc) || nc.State != queue.StateCancelled {
		t.Fatalf("cancelling a cancelled job: want NotClaimableError(cancelled), got %v", err)
	}
	if _, err := claim(t, s, id, time.Hour); !errors.As(err, &nc) {
		t.Fatalf("a cancelled job must not be claimable, got %v", err)
	}
	if err := s.Cancel(ctx, uuid.New(), "x"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("unknown job: want ErrNotFound, got %v", err)
	}
}

func TestClaimManyClaimsEachJobOnceAndSucceedManyFencesStaleAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	a, b, done := placedJob(t, s), placedJob(t, s), placedJob(t, s)
	req := func(id uuid.UUID) queue.ClaimRequest {
		return queue.ClaimRequest{JobID: id, PlacementVersion: 1, Lease: time.Hour, WorkerID: "w", Host: "h", PID: 1, Pool: "p"}
	}
	if _, err := claim(t, s, done, time.Hour); err != nil {
		t.Fatal(err)
	}
	// a is named twice, as a redelivered message would name it.
	res, err := s.ClaimMany(ctx, []queue.ClaimRequest{req(a), req(b), req(a), req(done), req(uuid.New())})
	if err != nil {
		t.Fatal(err)
	}
	var nc *queue.NotClaimableError
	switch {
	case res[0].Err != nil || res[0].Claimed.Job.Attempt != 1:
		t.Fatalf("a: want attempt 1, got %+v", res[0])
	case res[1].Err != nil || res[1].Claimed.Job.Attempt != 1:
		t.Fatalf("b: want attempt 1, got %+v", res[1])
	case !errors.As(res[2].Err, &nc) || nc.LeaseLeft <= 0:
		t.Fatalf("a named again must find it running under a live lease, got %v", res[2].Err)
	case !errors.As(res[3].Err, &nc) || nc.LeaseLeft <= 0:
		t.Fatalf("a job claimed earlier must not be claimed again, got %v", res[3].Err)
	case !errors.Is(res[4].Err, queue.ErrNotFound):
		t.Fatalf("an unknown job: want ErrNotFound, got %v", res[4].Err)
	}
	expireLease(t, s, b)
	if _, err := claim(t, s, b, time.Hour); err != nil {
		t.Fatal(err)
	}
	recorded, err := s.SucceedMany(ctx, []queue.AttemptRef{{JobID: a, Attempt: 1}, {JobID: b, Attempt: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !recorded[0] || recorded[1] {
		t.Fatalf("want a recorded and b's superseded attempt 1 fenced, got %v", recorded)
	}
	if j, _ := s.Job(ctx, b); j.State != queue.StateRunning || j.Attempt != 2 {
		t.Fatalf("a fenced success must not touch the job: %+v", j)
	}
	attempts, err := s.Attempts(ctx, a)
	if err != nil || len(attempts) != 1 || attempts[0].Outcome != queue.OutcomeSucceeded {
		t.Fatalf("a: want one succeeded attempt, got %+v (%v)", attempts, err)
	}
	attempts, err = s.Attempts(ctx, b)
	if err != nil || len(attempts) != 2 || attempts[0].Outcome != queue.OutcomeLost || attempts[1].EndedAt != nil {
		t.Fatalf("b: want attempt 1 lost and attempt 2 running, got %+v (%v)", attempts, err)
	}
}

// TestClaimManyRecordsEachClaimUnderItsOwnWorker claims, in one batch, jobs
// for three workers of two pools, as the worker service merges the claims of
// several workers: each attempt, lease, "running" event and residency check
// is the claiming worker's own.
func TestClaimManyRecordsEachClaimUnderItsOwnWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	free := placedJob(t, s)
	bound := func() uuid.UUID {
		id := uuid.New()
		if _, err := s.RecordJobs(ctx, []queue.NewJob{{ID: id, Spec: mustSpec(t, "command: [/bin/true]")}}); err != nil {
			t.Fatal(err)
		}
		pl := queue.Placement{Version: 1, Pool: "q", Region: "eu", Residency: "EU", Countries: []string{"DE", "FR"}}
		if _, err := s.RecordPlacements(ctx, []queue.PlacedJob{{JobID: id, Placement: pl}}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	inEU, outside, otherPool := bound(), bound(), bound()
	res, err := s.ClaimMany(ctx, []queue.ClaimRequest{
		{JobID: free, PlacementVersion: 1, Lease: time.Hour, WorkerID: "w1", Host: "h1", PID: 11, Pool: "p"},
		{JobID: inEU, PlacementVersion: 1, Lease: 2 * time.Minute, WorkerID: "w2", Host: "h2", PID: 22, Pool: "q", Country: "FR", NodeID: "n2"},
		{JobID: outside, PlacementVersion: 1, Lease: 2 * time.Minute, WorkerID: "w3", Host: "h3", PID: 33, Pool: "q", Country: "US"},
		{JobID: otherPool, PlacementVersion: 1, Lease: time.Hour, WorkerID: "w1", Host: "h1", PID: 11, Pool: "p"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var refused *queue.ClaimRefusedError
	var nc *queue.NotClaimableError
	switch {
	case res[0].Err != nil || res[1].Err != nil:
		t.Fatalf("want both claims inside their pools and residencies claimed, got %v and %v", res[0].Err, res[1].Err)
	case !errors.As(res[2].Err, &refused):
		t.Fatalf("a claim from a pool in the US of a job bound to the EU: want refused, got %+v", res[2])
	case res[3].Claimed != nil:
		t.Fatalf("a worker of pool p claimed a job placed on pool q: %+v", res[3].Claimed.Job)
	case res[3].Err == nil || errors.As(res[3].Err, &nc) && nc.State != queue.StatePlaced:
		t.Fatalf("a claim from another pool: want it unclaimed with the job still placed, got %v", res[3].Err)
	}
	for _, c := range []struct {
		id                 uuid.UUID
		worker, host, pool string
		pid                int
		lease              time.Duration
	}{{free, "w1", "h1", "p", 11, time.Hour}, {inEU, "w2", "h2", "q", 22, 2 * time.Minute}} {
		attempts, err := s.Attempts(ctx, c.id)
		if err != nil || len(attempts) != 1 {
			t.Fatalf("job %s: want one attempt, got %+v (%v)", c.id, attempts, err)
		}
		if a := attempts[0]; a.WorkerID != c.worker || a.Host != c.host || a.Pool != c.pool || a.PID != c.pid {
			t.Fatalf("job %s: attempt recorded for %s on %s (pid %d, pool %s), want %s on %s (pid %d, pool %s)",
				c.id, a.WorkerID, a.Host, a.PID, a.Pool, c.worker, c.host, c.pid, c.pool)
		}
		j, err := s.Job(ctx, c.id)
		if err != nil || j.LeaseExpiresAt == nil {
			t.Fatalf("job %s: %+v, %v", c.id, j, err)
		}
		if left := time.Until(*j.LeaseExpiresAt); left > c.lease || left < c.lease-time.Minute {
			t.Fatalf("job %s: lease ends in %s, want its claim's %s", c.id, left, c.lease)
		}
		events, err := s.EventsOf(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("running on %s (pid %d, pool %s)", c.host, c.pid, c.pool)
		if last := events[len(events)-1]; last.State != queue.StateRunning || last.Message != want {
			t.Fatalf("job %s: last event %+v, want running %q", c.id, last, want)
		}
	}
	for _, id := range []uuid.UUID{outside, otherPool} {
		if j, _ := s.Job(ctx, id); j.State != queue.StatePlaced || j.Attempt != 0 {
			t.Fatalf("job %s: an unclaimed job changed: %+v", id, j)
		}
	}
}

func TestSucceedInPoolsRecordsOnlyAttemptsOfTheReportingPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	id := runningJob(t, s)
	ref := queue.AttemptRef{JobID: id, Attempt: 1}
	recorded, err := s.SucceedInPools(ctx, []queue.PoolAttemptRef{{AttemptRef: ref, Pool: "us"}})
	if err != nil || recorded[0] {
		t.Fatalf("another pool's report: want nothing recorded, got %v, %v", recorded, err)
	}
	if j, _ := s.Job(ctx, id); j.State != queue.StateRunning {
		t.Fatalf("another pool's report changed the job: %+v", j)
	}
	recorded, err = s.SucceedInPools(ctx, []queue.PoolAttemptRef{{AttemptRef: ref, Pool: "p"}})
	if err != nil || !recorded[0] {
		t.Fatalf("the claiming pool's report: want recorded, got %v, %v", recorded, err)
	}
}

// TestConcurrentClaimsOfOverlappingBatchesClaimEachJobOnce has workers claim
// the same jobs at once, each in its own order: every job is claimed by
// exactly one of them, and no batch fails (batches lock their jobs in one
// order, so they cannot deadlock).
func TestConcurrentClaimsOfOverlappingBatchesClaimEachJobOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	const jobs, workers, rounds = 40, 6, 3
	for round := range rounds {
		ids := make([]uuid.UUID, jobs)
		for i := range ids {
			ids[i] = placedJob(t, s)
		}
		claimedBy := make([][]string, jobs)
		var mu sync.Mutex
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				worker := fmt.Sprintf("w%d", w)
				order := rand.New(rand.NewPCG(uint64(round), uint64(w))).Perm(jobs)
				reqs := make([]queue.ClaimRequest, jobs)
				for i, j := range order {
					reqs[i] = queue.ClaimRequest{JobID: ids[j], PlacementVersion: 1, ClaimID: uuid.New(), Lease: time.Hour, WorkerID: worker, Host: "h", PID: w, Pool: "p"}
				}
				res, err := s.ClaimMany(ctx, reqs)
				if err != nil {
					errs <- fmt.Errorf("%s: %w", worker, err)
					return
				}
				var nc *queue.NotClaimableError
				mu.Lock()
				defer mu.Unlock()
				for i, r := range res {
					switch {
					case r.Err == nil:
						claimedBy[order[i]] = append(claimedBy[order[i]], worker)
					case !errors.As(r.Err, &nc):
						errs <- fmt.Errorf("%s claiming job %d: %w", worker, order[i], r.Err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for j, by := range claimedBy {
			if len(by) != 1 {
				t.Fatalf("round %d: job %d claimed by %v, want exactly one worker", round, j, by)
			}
		}
	}
}

// A hand-back's reason says why a job waits in its pool; once another
// attempt claims it, the job no longer shows it (gpuq status of a running
// job said "retry 1 of 2 in 10s"), while the attempt and the trail keep it.
func TestAClaimClearsTheReasonOfTheHandBackBeforeIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	id := placedJob(t, s)
	c, err := claim(t, s, id, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	const why = "exited with status 3; retry 1 of 2 in 10s"
	if err := s.Requeue(ctx, id, c.Job.Attempt, queue.OutcomeRetry, nil, why); err != nil {
		t.Fatal(err)
	}
	if j := must(s.Job(ctx, id))(t); j.State != queue.StatePlaced || j.Reason != why {
		t.Fatalf("a job handed back: %s with reason %q, want placed with %q", j.State, j.Reason, why)
	}
	c, err = claim(t, s, id, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if j := must(s.Job(ctx, id))(t); c.Job.Reason != "" || j.State != queue.StateRunning || j.Reason != "" {
		t.Fatalf("a job claimed again: %s with reason %q (claim answered %q), want running with none", j.State, j.Reason, c.Job.Reason)
	}
	events := must(s.EventsOf(ctx, id))(t)
	if !slices.ContainsFunc(events, func(ev queue.Event) bool { return ev.Message == why }) {
		t.Fatalf("the trail lost the hand-back's reason: %+v", events)
	}
}

func TestAPlacedJobsLineCountsThePoolsJobsThatWaitedLongerAndThoseRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	place := func(pool string) *queue.Job {
		t.Helper()
		id := uuid.New()
		must(s.RecordJobs(ctx, []queue.NewJob{{ID: id, Spec: mustSpec(t, "command: [/bin/true]")}}))(t)
		must(s.RecordPlacements(ctx, []queue.PlacedJob{{JobID: id, Placement: queue.Placement{Version: 1, Pool: pool, Region: "r"}}}))(t)
		return must(s.Job(ctx, id))(t)
	}
	line := func(j *queue.Job) queue.PoolLine {
		t.Helper()
		j = must(s.Job(ctx, j.ID))(t)
		return *must(s.PoolLine(ctx, j))(t)
	}
	first, second, third := place("p"), place("p"), place("p")
	place("q") // another pool's job is in another line
	if got, want := line(third), (queue.PoolLine{Pool: "p", Ahead: 2}); got != want {
		t.Fatalf("the third job placed: %+v, want %+v", got, want)
	}
	c, err := claim(t, s, first.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := line(third), (queue.PoolLine{Pool: "p", Ahead: 1, Running: 1}); got != want {
		t.Fatalf("with the first job running: %+v, want %+v", got, want)
	}
	// A job handed back joins the end of the line.
	if err := s.Requeue(ctx, first.ID, c.Job.Attempt, queue.OutcomeRetry, nil, "exited with status 3"); err != nil {
		t.Fatal(err)
	}
	if got, want := line(first), (queue.PoolLine{Pool: "p", Ahead: 2}); got != want {
		t.Fatalf("the first job handed back: %+v, want %+v", got, want)
	}
	if got, want := line(second), (queue.PoolLine{Pool: "p"}); got != want {
		t.Fatalf("the job at the head of the line: %+v, want %+v", got, want)
	}
	// Jobs placed in the same instant stand in the order of their ids.
	if _, err := s.DB.Exec(`UPDATE jobs SET updated_at = $1 WHERE pool = 'p'`, time.Now()); err != nil {
		t.Fatal(err)
	}
	ids := []uuid.UUID{first.ID, second.ID, third.ID}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	for i, id := range ids {
		if got := line(&queue.Job{ID: id}); got.Ahead != i {
			t.Fatalf("job %d of three by id, all placed at once: %d ahead, want %d", i+1, got.Ahead, i)
		}
	}
}
