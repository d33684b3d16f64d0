package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/workers"
)

type clientHarness struct {
	n     *queuetest.NATS
	store *store.Store
	dbURL string
}

// startClientService serves the client service on a fresh NATS server and
// database, with quiet as its Quiet.
func startClientService(t *testing.T, quiet time.Duration) *clientHarness {
	t.Helper()
	return startClientServiceOn(t, quiet, nil)
}

// startClientServiceOn is startClientService with the service's store
// wrapped by wrap (nil: none).
func startClientServiceOn(t *testing.T, quiet time.Duration, wrap func(*store.Store) control.ClientServiceStore) *clientHarness {
	t.Helper()
	n := queuetest.StartNATS(t)
	s, url := queuetest.Store(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var st control.ClientServiceStore = s
	if wrap != nil {
		st = wrap(s)
	}
	svc := &control.ClientService{NATS: n.NC, Store: st, JS: n.JS, Archives: &workers.ObjectStore{JS: n.JS}, Quiet: quiet}
	if _, err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return &clientHarness{n: n, store: s, dbURL: url}
}

// call sends a request and returns the answer's body, or its error code and
// message.
func (h *clientHarness) call(t *testing.T, project, op string, req any) (body []byte, code, msg string) {
	t.Helper()
	data, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := h.n.NC.Request(queue.ClientServiceSubject(project, op), data, 40*time.Second)
	if err != nil {
		t.Fatalf("%s on %s: %v", op, project, err)
	}
	return reply.Data, reply.Header.Get(micro.ErrorCodeHeader), reply.Header.Get(micro.ErrorHeader)
}

// recordJob records a placed job of project.
func (h *clientHarness) recordJob(t *testing.T, project string) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id := uuid.New()
	spec := mustSpec(t, "project: "+project+"\ncommand: [/bin/true]")
	if _, err := h.store.RecordJobs(ctx, []queue.NewJob{{ID: id, Spec: spec}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.RecordPlacements(ctx, []queue.PlacedJob{{JobID: id, Placement: queue.Placement{Version: 1, Pool: "p", Region: "r"}}}); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestClientServiceAnswersNotFoundForAJobOfAnotherProject(t *testing.T) {
	t.Parallel()
	h := startClientService(t, 0)
	id := h.recordJob(t, "teama")

	for _, op := range []string{queue.ClientOpJob, queue.ClientOpStatus, queue.ClientOpCancel, queue.ClientOpLogs,
		queue.ClientOpCheckpoints, queue.ClientOpWait, queue.ClientOpResults, queue.ClientOpExplain} {
		_, code, msg := h.call(t, "teamb", op, queue.ClientRequest{JobID: id})
		if code != "404" || msg != "job "+id.String()+" not found" {
			t.Errorf("%s of teama's job asked as teamb: %s %q, want 404 not found", op, code, msg)
		}
	}
	if j, _ := h.store.Job(context.Background(), id); j.State != queue.StatePlaced {
		t.Fatalf("a cancel from another project changed the job: %s", j.State)
	}
	body, _, _ := h.call(t, "teamb", queue.ClientOpList, queue.ClientRequest{})
	var list queue.ClientJobList
	if err := json.Unmarshal(body, &list); err != nil || len(list.Jobs) != 0 {
		t.Fatalf("teamb's listing shows no job of teama: %v %s", err, body)
	}
	for project, want := range map[string]int64{"teama": 1, "teamb": 0} {
		body, code, msg := h.call(t, project, queue.ClientOpCount, queue.ClientRequest{})
		var c queue.JobCounts
		if code != "" || json.Unmarshal(body, &c) != nil || c.Total != want || c.States[queue.StatePlaced] != want || len(c.States) != len(queue.States) {
			t.Fatalf("%s's count: %s %s %s, want %d placed", project, code, msg, body, want)
		}
	}

	body, code, msg := h.call(t, "teama", queue.ClientOpStatus, queue.ClientRequest{JobID: id})
	var st control.JobStatus
	if code != "" || json.Unmarshal(body, &st) != nil || st.Job.ID != id || st.Pool != "p" {
		t.Fatalf("status asked as the job's project: %s %s %s", code, msg, body)
	}
	body, _, _ = h.call(t, "teama", queue.ClientOpList, queue.ClientRequest{})
	if err := json.Unmarshal(body, &list); err != nil || len(list.Jobs) != 1 || list.Jobs[0].ID != id {
		t.Fatalf("teama's listing shows its job: %v %s", err, body)
	}
	body, code, _ = h.call(t, "teama", queue.ClientOpCancel, queue.ClientRequest{JobID: id})
	var job queue.Job
	if code != "" || json.Unmarshal(body, &job) != nil || job.State != queue.StateCancelled {
		t.Fatalf("cancel asked as the job's project: %s %s", code, body)
	}
	if _, code, msg = h.call(t, "teama", queue.ClientOpCancel, queue.ClientRequest{JobID: id}); code != "409" || !strings.Contains(msg, "already finished") {
		t.Fatalf("cancelling a finished job: %s %q, want 409 already finished", code, msg)
	}
}

// The client service's listing keeps, with runs_after, the jobs whose
// spec.after or spec.after_ended names that job (gpuq ls --runs-after, gpuq
// retry --downstream over NATS).
func TestClientServiceListsTheJobsThatRunAfterAJob(t *testing.T) {
	t.Parallel()
	h := startClientService(t, 0)
	prep := h.recordJob(t, "teama")
	var after []uuid.UUID
	for _, key := range []string{"after", "after_ended", "labels"} {
		id := uuid.New()
		value := fmt.Sprintf("[%s]", prep)
		if key == "labels" {
			value = fmt.Sprintf("{prep: %q}", prep)
		}
		spec := mustSpec(t, fmt.Sprintf("project: teama\ncommand: [/bin/true]\n%s: %s\n", key, value))
		if _, err := h.store.RecordJobs(context.Background(), []queue.NewJob{{ID: id, Spec: spec}}); err != nil {
			t.Fatal(err)
		}
		after = append(after, id)
	}
	body, code, msg := h.call(t, "teama", queue.ClientOpList, queue.ClientRequest{RunsAfter: prep})
	var list queue.ClientJobList
	if code != "" || json.Unmarshal(body, &list) != nil || len(list.Jobs) != 2 || list.Jobs[0].ID != after[1] || list.Jobs[1].ID != after[0] {
		t.Fatalf("jobs after %s: %s %s %s, want %s and %s", prep, code, msg, body, after[1], after[0])
	}
	if body, _, _ = h.call(t, "teama", queue.ClientOpList, queue.ClientRequest{RunsAfter: after[0]}); json.Unmarshal(body, &list) != nil || len(list.Jobs) != 0 {
		t.Fatalf("jobs after a job nothing runs after: %s", body)
	}
}

func TestClientServiceRefusesBadRequestsNamingTheField(t *testing.T) {
	t.Parallel()
	h := startClientService(t, 0)
	id := h.recordJob(t, "teama")
	for _, c := range []struct {
		name, op string
		req      any
		want     string
	}{
		{"unknown field", queue.ClientOpStatus, map[string]any{"job_id": id, "jobid": id}, `unknown field "jobid"`},
		{"no job id", queue.ClientOpStatus, map[string]any{}, "job_id: required"},
		{"wait too long", queue.ClientOpWait, queue.ClientRequest{JobID: id, Wait: time.Hour}, "wait: must be 0–25s"},
		{"negative limit", queue.ClientOpList, queue.ClientRequest{Limit: -1}, "limit: must not be negative"},
		{"list too long", queue.ClientOpList, queue.ClientRequest{Limit: 100000}, "limit: must be 1–500"},
		{"unknown state", queue.ClientOpList, queue.ClientRequest{State: "done"}, "state: must be one of"},
		{"label without a value", queue.ClientOpList, queue.ClientRequest{Label: "team"}, `label: want key=value, got "team"`},
		{"count of an unknown state", queue.ClientOpCount, queue.ClientRequest{State: "done"}, "state: must be one of"},
		{"count by a label without a value", queue.ClientOpCount, queue.ClientRequest{Label: "team"}, `label: want key=value, got "team"`},
		{"made-up cursor", queue.ClientOpList, queue.ClientRequest{Cursor: "abc"}, "cursor: not a cursor this service returned"},
		{"oversize", queue.ClientOpStatus, map[string]any{"job_id": id, "pool": strings.Repeat("x", queue.MaxClientRequest)}, "over the limit"},
		{"results of an unfinished job", queue.ClientOpResults, queue.ClientRequest{JobID: id}, "has no results: it is placed"},
	} {
		_, code, msg := h.call(t, "teama", c.op, c.req)
		if code == "" || code == "500" || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %s %q, want an error naming %q", c.name, code, msg, c.want)
		}
	}
	if j, _ := h.store.Job(context.Background(), id); j.State != queue.StatePlaced {
		t.Fatalf("bad requests changed the job: %s", j.State)
	}
}

func TestClientWaitReadsTheAuditTrailWhenTheJobsEventIsLost(t *testing.T) {
	t.Parallel()
	h := startClientService(t, 300*time.Millisecond)
	id := h.recordJob(t, "teama")
	body, _, _ := h.call(t, "teama", queue.ClientOpWait, queue.ClientRequest{JobID: id})
	var first queue.ClientWait
	if err := json.Unmarshal(body, &first); err != nil || first.Seen == 0 || first.Job.State != queue.StatePlaced {
		t.Fatalf("a wait without a wait answers the audit trail at once: %v %s", err, body)
	}

	// A second handle on the same database that announces nothing: the
	// cancellation is recorded, its event never reaches the stream.
	silent, err := store.Open(context.Background(), h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	answer := make(chan []byte, 1)
	go func() {
		body, _, _ := h.call(t, "teama", queue.ClientOpWait, queue.ClientRequest{JobID: id, Seen: first.Seen, Wait: 20 * time.Second})
		answer <- body
	}()
	time.Sleep(200 * time.Millisecond)
	if err := silent.Cancel(context.Background(), id, "cancelled by test"); err != nil {
		t.Fatal(err)
	}
	var w queue.ClientWait
	select {
	case body = <-answer:
	case <-time.After(15 * time.Second):
		t.Fatal("wait did not answer within 15 s of a cancellation whose event was lost")
	}
	if err := json.Unmarshal(body, &w); err != nil || w.Job.State != queue.StateCancelled ||
		len(w.Events) != 1 || w.Events[0].State != queue.StateCancelled || w.Seen != first.Seen+1 {
		t.Fatalf("wait answers the recorded cancellation: %v %s", err, body)
	}
	stream, err := h.n.JS.Stream(context.Background(), queue.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	last, err := stream.GetLastMsgForSubject(context.Background(), queue.EventSubject(id.String()))
	if err != nil {
		t.Fatal(err)
	}
	var announced queue.Event
	if err := json.Unmarshal(last.Data, &announced); err != nil || announced.State == queue.StateCancelled {
		t.Fatalf("the cancellation was announced after all (%v): the test proves nothing", err)
	}
}

// cancelAfterTrail is a store that, once, has the job cancelled right after
// a read of its audit trail returns: the moment a wait's two reads could
// straddle.
type cancelAfterTrail struct {
	control.ClientServiceStore
	once sync.Once
	real *store.Store
	errs chan error
}

func (s *cancelAfterTrail) EventsOf(ctx context.Context, id uuid.UUID) ([]queue.Event, error) {
	history, err := s.ClientServiceStore.EventsOf(ctx, id)
	s.once.Do(func() { s.errs <- s.real.Cancel(ctx, id, "cancelled between the reads") })
	return history, err
}

func TestClientWaitNeverAnswersAFinishedJobWithoutItsLastEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var st *cancelAfterTrail
	h := startClientServiceOn(t, 300*time.Millisecond, func(s *store.Store) control.ClientServiceStore {
		st = &cancelAfterTrail{ClientServiceStore: s, real: s, errs: make(chan error, 1)}
		return st
	})
	id := h.recordJob(t, "teama")
	history, err := h.store.EventsOf(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	body, _, _ := h.call(t, "teama", queue.ClientOpWait, queue.ClientRequest{JobID: id, Seen: len(history), Wait: 10 * time.Second})
	if err := <-st.errs; err != nil {
		t.Fatal(err)
	}
	var w queue.ClientWait
	if err := json.Unmarshal(body, &w); err != nil {
		t.Fatal(err)
	}
	if w.Job.State.Terminal() && (len(w.Events) == 0 || w.Events[len(w.Events)-1].State != w.Job.State) {
		t.Fatalf("wait answered job %s %s with events %+v: a finished job's answer must hold the event that finished it", id, w.Job.State, w.Events)
	}
	if len(w.Events) == 0 || w.Events[len(w.Events)-1].State != queue.StateCancelled || w.Seen != len(history)+1 {
		t.Fatalf("wait must answer the cancellation committed while it read: %s", body)
	}
}

// A client service stopped while requests stream in serves what its
// subscriptions had taken, its stop waiting for them, and nothing races
// or panics (a request taken while a stop waited on a sync.WaitGroup was a
// data race, and sometimes a "WaitGroup is reused" panic).
func TestClientServiceStopsWhileRequestsStreamIn(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	body, err := json.Marshal(queue.ClientRequest{})
	if err != nil {
		t.Fatal(err)
	}
	replies, err := n.NC.SubscribeSync(n.NC.NewRespInbox())
	if err != nil {
		t.Fatal(err)
	}
	// Every request is answered: by the service when it reached the service
	// before its stop (the first 100 of each round at least, published before
	// the cancel on the connection the service drains), else "no responders"
	// by the NATS server.
	served, refused := 0, 0
	for round := range 10 {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		svc := &control.ClientService{NATS: n.NC, Store: s, JS: n.JS, Archives: &workers.ObjectStore{JS: n.JS}, Concurrency: 1}
		if _, err := svc.Start(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			if i == 100 {
				cancel()
			}
			if err := n.NC.PublishRequest(queue.ClientServiceSubject("default", queue.ClientOpCount), replies.Subject, body); err != nil {
				t.Fatal(err)
			}
		}
		roundServed := 0
		for range 200 {
			switch _, err := replies.NextMsg(30 * time.Second); {
			case errors.Is(err, nats.ErrNoResponders):
				refused++
			case err != nil:
				t.Fatalf("round %d: %d requests answered, %d refused, then none: %v", round, served+roundServed, refused, err)
			default:
				roundServed++
			}
		}
		if roundServed < 100 {
			t.Fatalf("round %d: %d requests served, want at least the 100 sent before the stop", round, roundServed)
		}
		served += roundServed
	}
	t.Logf("%d served, %d refused", served, refused)
}
