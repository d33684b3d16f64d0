package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/micro"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
)

// staticPools is a pool registry of fixed locations.
type staticPools map[string]control.PoolLocation

func (p staticPools) PoolLocation(_ context.Context, pool string) (control.PoolLocation, bool, error) {
	loc, ok := p[pool]
	return loc, ok, nil
}

// workerService serves the worker service on a fresh NATS and database.
func workerService(t *testing.T) (*queuetest.NATS, *store.Store, micro.Service) {
	t.Helper()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pools := staticPools{"p": {Region: "r", Country: "DE"}, "us": {Region: "us-1", Country: "US"}}
	svc, err := (&control.WorkerService{NATS: n.NC, Store: s, Pools: pools}).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n, s, svc
}

func ask(t *testing.T, n *queuetest.NATS, subject string, req any) *queue.WorkerReply {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := n.NC.Request(subject, body, 10*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	var reply queue.WorkerReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		t.Fatal(err)
	}
	return &reply
}

func TestWorkerServiceClaimsLeasesAndCompletesFencedByAttempt(t *testing.T) {
	t.Parallel()
	n, s, svc := workerService(t)
	id := placedJob(t, s)
	claim := queue.WorkerRequest{Pool: "p", WorkerID: "w1", Claims: []queue.ClaimRequest{{
		JobID: id, PlacementVersion: 1, Lease: 30 * time.Second, WorkerID: "w1", Host: "h", PID: 1, Pool: "p"}}}
	r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpClaim), claim)
	if r.Error != nil || len(r.Claims) != 1 || r.Claims[0].Claimed == nil || r.Claims[0].Claimed.Job.Attempt != 1 {
		t.Fatalf("claim: %+v", r)
	}
	// A second claim finds the job running under a live lease.
	r = ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpClaim), claim)
	if e := r.Claims[0].Error; e == nil || e.Kind != queue.WireNotClaimable || e.LeaseLeft <= 0 {
		t.Fatalf("second claim: %+v", r.Claims[0])
	}
	hb := queue.WorkerRequest{Pool: "p", JobID: id, Attempt: 1, Lease: 30 * time.Second}
	if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpHeartbeat), hb); r.Error != nil {
		t.Fatalf("heartbeat: %+v", r.Error)
	}
	hb.Attempt = 2
	if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpHeartbeat), hb); r.Error == nil || r.Error.Kind != queue.WireFenced {
		t.Fatalf("heartbeat of an attempt that does not own the job: want fenced, got %+v", r.Error)
	}
	done := queue.WorkerRequest{Pool: "p", Completions: []queue.Completion{{JobID: id, Attempt: 1}}}
	r = ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpComplete), done)
	if r.Error != nil || len(r.Recorded) != 1 || !r.Recorded[0] {
		t.Fatalf("complete: %+v", r)
	}
	j, err := s.Job(context.Background(), id)
	if err != nil || j.State != queue.StateSucceeded {
		t.Fatalf("job after completion: %+v, %v", j, err)
	}
	if st := svc.Stats(); len(st.Endpoints) != len(queue.WorkerOps) {
		t.Fatalf("want %d endpoints, got %d", len(queue.WorkerOps), len(st.Endpoints))
	}
}

func TestWorkerServiceRefusesARequestForAnotherPoolNamingTheField(t *testing.T) {
	t.Parallel()
	n, s, _ := workerService(t)
	id := placedJob(t, s)
	for _, c := range []struct {
		subject string
		req     queue.WorkerRequest
		want    string
	}{
		{queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "other", Claims: []queue.ClaimRequest{{JobID: id, PlacementVersion: 1, Lease: time.Minute, Pool: "p"}}}, "pool:"},
		{queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{{JobID: id, PlacementVersion: 1, Lease: time.Minute, Pool: "other"}}}, "claims[0].pool:"},
		{queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p"}, "claims: must hold"},
		{queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{claimOf(id, "p"), {JobID: id, PlacementVersion: 1, Lease: time.Minute, Pool: "p", Host: "h\x00"}}}, "claims[1].host: must not contain a NUL"},
		{queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{{JobID: id, PlacementVersion: 1, Lease: time.Minute, Pool: "p", WorkerID: "w\x1b[2J"}}}, "claims[0].worker_id: must not contain control"},
		{queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{{JobID: id, PlacementVersion: 1, Lease: time.Minute, Pool: "p", NodeID: strings.Repeat("n", queue.MaxClaimantText+1)}}}, "claims[0].node_id: 257 bytes"},
		{queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{{JobID: id, PlacementVersion: 1, Lease: time.Minute, Pool: "p", PID: -1}}}, "claims[0].pid:"},
		{queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{{JobID: id, PlacementVersion: 1 << 31, Lease: time.Minute, Pool: "p"}}}, "claims[0].placement_version:"},
		{queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{{JobID: id, PlacementVersion: 1, Lease: time.Minute, Pool: "p", CanaryRunID: -2}}}, "claims[0].canary_run_id:"},
		{queue.WorkerServiceSubject("p", queue.WorkerOpHeartbeat), queue.WorkerRequest{Pool: "p", Attempt: 1}, "job_id: required"},
		{queue.WorkerServiceSubject("p", queue.WorkerOpCheckpoint), queue.WorkerRequest{Pool: "p", JobID: id, Attempt: 1}, "archive: required"},
		{queue.WorkerServiceSubject("p", queue.WorkerOpCanary), queue.WorkerRequest{Pool: "p", Canary: &queue.CanaryRecord{NodeID: "n", Pool: "q"}}, "canary.pool:"},
		// An attempt ends with an outcome its operation can have: a
		// worker cannot hand a job back as succeeded, nor store any text
		// as an outcome.
		{queue.WorkerServiceSubject("p", queue.WorkerOpHandback), queue.WorkerRequest{Pool: "p", JobID: id, Outcome: queue.OutcomeSucceeded}, `outcome: "succeeded" is not an outcome of handback`},
		{queue.WorkerServiceSubject("p", queue.WorkerOpFail), queue.WorkerRequest{Pool: "p", JobID: id, Outcome: queue.OutcomeShutdown}, `outcome: "shutdown" is not an outcome of fail`},
		{queue.WorkerServiceSubject("p", queue.WorkerOpEnd), queue.WorkerRequest{Pool: "p", JobID: id, Outcome: "\x1b[2J"}, `outcome: "\x1b[2J" is not an outcome of end`},
		{queue.WorkerServiceSubject("p", queue.WorkerOpFail), queue.WorkerRequest{Pool: "p", JobID: id}, `outcome: "" is not an outcome of fail`},
	} {
		r := ask(t, n, c.subject, c.req)
		if r.Error == nil || r.Error.Kind != queue.WireBadRequest || !strings.Contains(r.Error.Message, c.want) {
			t.Errorf("%s %+v: want a bad request naming %q, got %+v", c.subject, c.req, c.want, r.Error)
		}
	}
	j, err := s.Job(context.Background(), id)
	if err != nil || j.State != queue.StatePlaced || j.Attempt != 0 {
		t.Fatalf("a refused request changed the job: %+v, %v", j, err)
	}
}

func claimOf(id uuid.UUID, pool string) queue.ClaimRequest {
	return queue.ClaimRequest{JobID: id, PlacementVersion: 1, Lease: 30 * time.Second, WorkerID: "w1", Host: "h", PID: 1, Pool: pool, ClaimID: uuid.New()}
}

func TestWorkerServiceAnswersARepeatedRequestAsTheFirstWithoutApplyingItTwice(t *testing.T) {
	t.Parallel()
	n, s, _ := workerService(t)
	ctx := context.Background()
	id := placedJob(t, s)
	claim := queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{claimOf(id, "p")}}
	for i := range 2 {
		r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpClaim), claim)
		if r.Error != nil || r.Claims[0].Claimed == nil || r.Claims[0].Claimed.Job.Attempt != 1 {
			t.Fatalf("claim %d: %+v %+v", i+1, r.Error, r.Claims)
		}
	}
	// Another claim request (a redelivered message) finds the job running.
	other := queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{claimOf(id, "p")}}
	if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpClaim), other); r.Claims[0].Error == nil || r.Claims[0].Error.Kind != queue.WireNotClaimable {
		t.Fatalf("another claim: %+v", r.Claims[0])
	}
	cp := queue.WorkerRequest{Pool: "p", JobID: id, Attempt: 1, Archive: &queue.ArchiveRecord{Bytes: 1, SHA256: "x", Region: "r", StoreURI: queue.JobArchivePrefix("p", id) + "checkpoint-a1-1.tar.zst"}}
	for i := range 2 {
		if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpCheckpoint), cp); r.Error != nil || r.Seq != 1 {
			t.Fatalf("checkpoint %d: seq %d, %+v", i+1, r.Seq, r.Error)
		}
	}
	done := queue.WorkerRequest{Pool: "p", Completions: []queue.Completion{{JobID: id, Attempt: 1}}}
	for i := range 2 {
		if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpComplete), done); r.Error != nil || !r.Recorded[0] {
			t.Fatalf("completion %d: %+v", i+1, r)
		}
	}
	attempts, err := s.Attempts(ctx, id)
	if err != nil || len(attempts) != 1 {
		t.Fatalf("want one attempt, got %v, %v", attempts, err)
	}
	cps, err := s.Checkpoints(ctx, id)
	if err != nil || len(cps) != 1 {
		t.Fatalf("want one checkpoint, got %v, %v", cps, err)
	}
	var succeeded int
	s.DB.QueryRow(`SELECT count(*) FROM job_events WHERE job_id = $1 AND state = 'succeeded'`, id).Scan(&succeeded) //nolint:errcheck // zero on error
	if succeeded != 1 {
		t.Fatalf("want one success event, got %d", succeeded)
	}
	// A completion by an attempt that never owned the job stays fenced.
	late := queue.WorkerRequest{Pool: "p", Completions: []queue.Completion{{JobID: id, Attempt: 2}}}
	if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpComplete), late); r.Error != nil || r.Recorded[0] {
		t.Fatalf("a stale completion: %+v", r)
	}
}

// TestWorkerServiceAnswersEachOfManyConcurrentClaimsWithItsOwnResults sends
// the claim requests of many workers at once, as the service merges them
// into shared statements: each worker gets the results of its own claims, in
// its request's order, and each attempt is recorded under its own worker.
func TestWorkerServiceAnswersEachOfManyConcurrentClaimsWithItsOwnResults(t *testing.T) {
	t.Parallel()
	n, s, _ := workerService(t)
	ctx := context.Background()
	const workers, each = 12, 5
	jobs := make([][]uuid.UUID, workers)
	for w := range jobs {
		for range each {
			jobs[w] = append(jobs[w], placedJob(t, s))
		}
	}
	// The last worker claims, besides its own, the first worker's first
	// job: only one of the two claims may start it.
	jobs[workers-1] = append(jobs[workers-1], jobs[0][0])
	type answer struct {
		w     int
		reply *queue.WorkerReply
		err   error
	}
	answers := make(chan answer, workers)
	for w := range workers {
		go func() {
			id := fmt.Sprintf("w%d", w)
			req := queue.WorkerRequest{Pool: "p", WorkerID: id}
			for _, j := range jobs[w] {
				req.Claims = append(req.Claims, queue.ClaimRequest{JobID: j, PlacementVersion: 1, Lease: time.Minute,
					WorkerID: id, Host: "host-" + id, PID: 100 + w, Pool: "p", ClaimID: uuid.New()})
			}
			body, err := json.Marshal(req)
			if err != nil {
				answers <- answer{w: w, err: err}
				return
			}
			msg, err := n.NC.Request(queue.WorkerServiceSubject("p", queue.WorkerOpClaim), body, 10*time.Second)
			if err != nil {
				answers <- answer{w: w, err: err}
				return
			}
			var reply queue.WorkerReply
			answers <- answer{w: w, reply: &reply, err: json.Unmarshal(msg.Data, &reply)}
		}()
	}
	shared := 0
	for range workers {
		a := <-answers
		if a.err != nil || a.reply.Error != nil {
			t.Fatalf("worker %d: %v %+v", a.w, a.err, a.reply)
		}
		if len(a.reply.Claims) != len(jobs[a.w]) {
			t.Fatalf("worker %d: %d results for %d claims", a.w, len(a.reply.Claims), len(jobs[a.w]))
		}
		for i, r := range a.reply.Claims {
			if r.Claimed == nil {
				if jobs[a.w][i] != jobs[0][0] || r.Error == nil || r.Error.Kind != queue.WireNotClaimable {
					t.Fatalf("worker %d, claim %d of job %s: %+v", a.w, i, jobs[a.w][i], r.Error)
				}
				continue
			}
			if r.Claimed.Job.ID != jobs[a.w][i] {
				t.Fatalf("worker %d, claim %d: the answer is for job %s, the claim for %s", a.w, i, r.Claimed.Job.ID, jobs[a.w][i])
			}
			if r.Claimed.Job.ID == jobs[0][0] {
				shared++
			}
		}
	}
	if shared != 1 {
		t.Fatalf("the job claimed by two workers was started %d times, want once", shared)
	}
	for w := range workers {
		for _, j := range jobs[w][:each] {
			attempts, err := s.Attempts(ctx, j)
			if err != nil || len(attempts) != 1 {
				t.Fatalf("job %s: want one attempt, got %+v (%v)", j, attempts, err)
			}
			if j != jobs[0][0] && (attempts[0].WorkerID != fmt.Sprintf("w%d", w) || attempts[0].PID != 100+w) {
				t.Fatalf("job %s claimed by worker %d: attempt recorded for %s (pid %d)", j, w, attempts[0].WorkerID, attempts[0].PID)
			}
		}
	}
}

func TestWorkerServiceRefusesAClaimOutsideResidencyAndNeverEndsTheJob(t *testing.T) {
	t.Parallel()
	n, s, _ := workerService(t)
	ctx := context.Background()
	id := uuid.New()
	if _, err := s.RecordJobs(ctx, []queue.NewJob{{ID: id, Spec: mustSpec(t, "command: [/bin/true]\nplacement: {residency: EU}")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordPlacements(ctx, []queue.PlacedJob{{JobID: id, Placement: queue.Placement{Version: 1, Pool: "p", Region: "r", Residency: "EU", Countries: []string{"DE", "FR"}}}}); err != nil {
		t.Fatal(err)
	}
	// The US pool's worker asks for the EU job, naming the EU pool's
	// country in nothing it sends: the service knows where "us" lies.
	r := ask(t, n, queue.WorkerServiceSubject("us", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "us", Claims: []queue.ClaimRequest{claimOf(id, "us")}})
	if e := r.Claims[0].Error; e == nil || e.Kind != queue.WireRefused || !strings.Contains(e.Message, "outside residency EU") {
		t.Fatalf("claim from the US pool: %+v", r.Claims[0])
	}
	j, err := s.Job(ctx, id)
	if err != nil || j.State != queue.StatePlaced || j.Attempt != 0 {
		t.Fatalf("a refused claim must leave the job waiting: %+v, %v", j, err)
	}
	var refusals int
	s.DB.QueryRow(`SELECT claim_refusals FROM jobs WHERE id = $1`, id).Scan(&refusals) //nolint:errcheck // zero on error
	if refusals != 1 {
		t.Fatalf("want the refusal counted once, got %d", refusals)
	}
	// The EU pool's own worker claims it; a checkpoint naming another
	// region than its pool's is refused, naming the field.
	if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{claimOf(id, "p")}}); r.Claims[0].Claimed == nil {
		t.Fatalf("claim from the EU pool: %+v", r.Claims[0].Error)
	}
	cp := queue.WorkerRequest{Pool: "p", JobID: id, Attempt: 1, Archive: &queue.ArchiveRecord{Bytes: 1, SHA256: "x", Region: "us-1", StoreURI: queue.JobArchivePrefix("p", id) + "checkpoint-a1-1.tar.zst"}}
	if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpCheckpoint), cp); r.Error == nil || !strings.Contains(r.Error.Message, `archive.region: "us-1" is not pool p's region "r"`) {
		t.Fatalf("a checkpoint in another region: %+v", r.Error)
	}
	// Nor may a record name an object outside the job's own part of its
	// pool's bucket: another job's, or another pool's bucket. The client
	// service would hand it out with the control plane's credential.
	for _, uri := range []string{
		queue.JobArchivePrefix("p", uuid.New()) + "outputs-a1.tar.zst",
		queue.JobArchivePrefix("us", id) + "checkpoint-a1-1.tar.zst",
		queue.JobArchivePrefix("p", id),
	} {
		other := queue.WorkerRequest{Pool: "p", JobID: id, Attempt: 1, Archive: &queue.ArchiveRecord{Bytes: 1, SHA256: "x", Region: "r", StoreURI: uri}}
		if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpCheckpoint), other); r.Error == nil || !strings.Contains(r.Error.Message, "archive.store_uri: must name an object of job "+id.String()) {
			t.Fatalf("a checkpoint naming %s: %+v", uri, r.Error)
		}
	}
	// The US worker cannot record into the EU job's attempt either, nor
	// store a checkpoint in its region for the job under any attempt.
	cp.Pool, cp.Archive.Region, cp.Archive.StoreURI = "us", "us-1", queue.JobArchivePrefix("us", id)+"checkpoint-a1-1.tar.zst"
	if r := ask(t, n, queue.WorkerServiceSubject("us", queue.WorkerOpCheckpoint), cp); r.Error == nil || !strings.Contains(r.Error.Message, "was claimed by pool p") {
		t.Fatalf("a checkpoint from the US pool: %+v", r.Error)
	}
	cp.Attempt = 2
	if r := ask(t, n, queue.WorkerServiceSubject("us", queue.WorkerOpCheckpoint), cp); r.Error == nil || !strings.Contains(r.Error.Message, "archive.region: region us-1 (country US) lies outside residency EU") {
		t.Fatalf("a checkpoint in the US region: %+v", r.Error)
	}
	if cps, _ := s.Checkpoints(ctx, id); len(cps) != 0 {
		t.Fatalf("refused checkpoints were recorded: %v", cps)
	}
	// The job (its spec and env) is read by the pool that ran it, and by
	// no other: to the US pool it does not exist.
	if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpJob), queue.WorkerRequest{Pool: "p", JobID: id}); r.Job == nil || r.Job.ID != id {
		t.Fatalf("the pool that claimed the job must read it: %+v", r.Error)
	}
	if r := ask(t, n, queue.WorkerServiceSubject("us", queue.WorkerOpJob), queue.WorkerRequest{Pool: "us", JobID: id}); r.Job != nil || r.Error == nil || r.Error.Kind != queue.WireNotFound {
		t.Fatalf("another pool must not read the job, got %+v %+v", r.Job, r.Error)
	}
}

func TestMarkDeadIsFencedByAttempt(t *testing.T) {
	t.Parallel()
	n, s, _ := workerService(t)
	ctx := context.Background()
	id := placedJob(t, s)
	// Attempt 0 (a worker that never claimed it) cannot end a placed job.
	dead := queue.WorkerRequest{Pool: "p", JobID: id, Attempt: 0, Message: "refused"}
	if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpDead), dead); r.Error == nil || r.Error.Kind != queue.WireFenced {
		t.Fatalf("dead-marking a placed job: %+v", r.Error)
	}
	if j, _ := s.Job(ctx, id); j.State != queue.StatePlaced {
		t.Fatalf("want placed, got %s", j.State)
	}
	ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{claimOf(id, "p")}})
	dead.Attempt = 1
	for i := range 2 {
		if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpDead), dead); r.Error != nil {
			t.Fatalf("dead-marking under the running attempt (%d): %+v", i+1, r.Error)
		}
	}
	if j, _ := s.Job(ctx, id); j.State != queue.StateDead {
		t.Fatalf("want dead, got %s", j.State)
	}
}

func TestWorkerServiceKeepsAWorkerOutOfAnotherPoolsAttempts(t *testing.T) {
	t.Parallel()
	n, s, _ := workerService(t)
	ctx := context.Background()
	id := placedJob(t, s)
	if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{claimOf(id, "p")}}); r.Claims[0].Claimed == nil {
		t.Fatalf("claim: %+v", r.Claims[0].Error)
	}
	// A worker of pool "us" that learnt the job's id and attempt.
	for _, c := range []struct {
		op  string
		req queue.WorkerRequest
	}{
		{queue.WorkerOpHeartbeat, queue.WorkerRequest{Pool: "us", JobID: id, Attempt: 1, Lease: time.Hour}},
		{queue.WorkerOpComplete, queue.WorkerRequest{Pool: "us", Completions: []queue.Completion{{JobID: id, Attempt: 1}}}},
		{queue.WorkerOpFail, queue.WorkerRequest{Pool: "us", JobID: id, Attempt: 1, Outcome: queue.OutcomeFailed, Message: "x"}},
		{queue.WorkerOpHandback, queue.WorkerRequest{Pool: "us", JobID: id, Attempt: 1, Outcome: queue.OutcomePreempted, Message: "x"}},
		{queue.WorkerOpDead, queue.WorkerRequest{Pool: "us", JobID: id, Attempt: 1, Message: "x"}},
	} {
		r := ask(t, n, queue.WorkerServiceSubject("us", c.op), c.req)
		if r.Error == nil || r.Error.Kind != queue.WireBadRequest || !strings.Contains(r.Error.Message, "was claimed by pool p, not us") {
			t.Errorf("%s from another pool: want refused naming the attempt, got %+v", c.op, r.Error)
		}
	}
	j, err := s.Job(ctx, id)
	if err != nil || j.State != queue.StateRunning || j.Attempt != 1 {
		t.Fatalf("another pool's worker changed the job: %+v, %v", j, err)
	}
	// The claiming pool's own worker still completes it.
	r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpComplete), queue.WorkerRequest{Pool: "p", Completions: []queue.Completion{{JobID: id, Attempt: 1}}})
	if r.Error != nil || !r.Recorded[0] {
		t.Fatalf("completion by the claiming pool: %+v", r)
	}
}
