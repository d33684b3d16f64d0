package control_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
)

// workerService serves the worker service on a fresh NATS and database.
func workerService(t *testing.T) (*queuetest.NATS, *store.Store, micro.Service) {
	t.Helper()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	svc, err := (&control.WorkerService{NATS: n.NC, Store: s}).Start(ctx)
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
		{queue.WorkerServiceSubject("p", queue.WorkerOpHeartbeat), queue.WorkerRequest{Pool: "p", Attempt: 1}, "job_id: required"},
		{queue.WorkerServiceSubject("p", queue.WorkerOpCheckpoint), queue.WorkerRequest{Pool: "p", JobID: id, Attempt: 1}, "archive: required"},
		{queue.WorkerServiceSubject("p", queue.WorkerOpCanary), queue.WorkerRequest{Pool: "p", Canary: &queue.CanaryRecord{NodeID: "n", Pool: "q"}}, "canary.pool:"},
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
