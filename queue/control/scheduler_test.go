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

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
)

// recordingPlacer places every job on one pool and records the calls; a job
// whose name starts with "reject" is refused.
type recordingPlacer struct {
	mu    sync.Mutex
	calls int
}

func (p *recordingPlacer) Place(_ context.Context, job *queue.Job, _ *control.Prior) (queue.Placement, error) {
	p.mu.Lock()
	p.calls++
	p.mu.Unlock()
	if len(job.Name) >= 6 && job.Name[:6] == "reject" {
		return queue.Placement{}, &queue.RejectionError{Reason: "no pool fits"}
	}
	return queue.Placement{Pool: "p1", Region: "eu-test", Residency: "EU", Countries: []string{"DE"}, Decision: []byte(`{"chosen":"p1"}`)}, nil
}

type harness struct {
	n     *queuetest.NATS
	store *store.Store
}

func startScheduler(t *testing.T, placer control.Placer) *harness {
	t.Helper()
	n := queuetest.StartNATS(t)
	store, _ := queuetest.Store(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&control.Scheduler{JS: n.JS, Store: store, Placer: placer}).Run(ctx) //nolint:errcheck // ends with ctx
	}()
	t.Cleanup(func() { cancel(); <-done })
	return &harness{n: n, store: store}
}

// submit submits a job named name that runs /bin/true.
func (h *harness) submit(t *testing.T, name string) uuid.UUID {
	t.Helper()
	sub, err := queue.Submit(context.Background(), h.n.JS, mustSpec(t, "name: "+name+"\ncommand: [/bin/true]\n"))
	if err != nil {
		t.Fatal(err)
	}
	return sub.JobID
}

func (h *harness) countJobs(t *testing.T) int {
	t.Helper()
	var n int
	if err := h.store.DB.QueryRow(`SELECT count(*) FROM jobs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (h *harness) waitState(t *testing.T, id uuid.UUID, want queue.JobState) *queue.Job {
	t.Helper()
	var job *queue.Job
	queuetest.Eventually(t, 20*time.Second, fmt.Sprintf("job %s to be %s", id, want), func() bool {
		var err error
		job, err = h.store.Job(context.Background(), id)
		return err == nil && job.State == want
	})
	return job
}

func TestSubmittedJobsArePlacedAndDispatchedOnce(t *testing.T) {
	t.Parallel()
	h := startScheduler(t, &recordingPlacer{})
	var ids []uuid.UUID
	for i := range 50 {
		ids = append(ids, h.submit(t, fmt.Sprintf("j%d", i)))
	}
	for _, id := range ids {
		h.waitState(t, id, queue.StatePlaced)
	}
	// The scheduler publishes a batch's run messages after it commits the
	// placements the test has just seen.
	var msgs map[string]uint64
	queuetest.Eventually(t, 10*time.Second, "a run message for every job", func() bool {
		msgs = queuetest.RunMessages(t, h.n.JS)
		return len(msgs) >= len(ids)
	})
	if len(msgs) != len(ids) {
		t.Fatalf("want %d run subjects, got %d", len(ids), len(msgs))
	}
	for _, id := range ids {
		if n := msgs[queue.RunSubject("p1", id.String())]; n != 1 {
			t.Fatalf("job %s has %d run messages, want 1", id, n)
		}
	}
	p, err := h.store.LatestPlacement(context.Background(), ids[0])
	if err != nil || p.Pool != "p1" || string(p.Decision) != `{"chosen": "p1"}` || len(p.Countries) != 1 {
		t.Fatalf("placement not recorded with its decision: %+v %v", p, err)
	}
	if n := queuetest.StreamMessages(t, h.n.JS, queue.StreamSubmit); n != 0 {
		t.Fatalf("every submission must be acknowledged, %d left", n)
	}
}

func TestSameIdempotencyKeyYieldsOneJob(t *testing.T) {
	t.Parallel()
	h := startScheduler(t, &recordingPlacer{})
	ctx := context.Background()
	spec := mustSpec(t, "command: [/bin/true]\nidempotency_key: notebook-cell-3\n")
	first, err := queue.Submit(ctx, h.n.JS, spec)
	if err != nil {
		t.Fatal(err)
	}
	second, err := queue.Submit(ctx, h.n.JS, spec)
	if err != nil {
		t.Fatal(err)
	}
	if second.JobID != first.JobID || !second.Duplicate {
		t.Fatalf("a re-run cell must name the same job: %+v then %+v", first, second)
	}
	// The same key published with another message id (after the dedupe
	// window, or by a raw publisher) still names the same job.
	body, _ := json.Marshal(spec)
	msg := nats.NewMsg(queue.SubmitSubject(spec.Project))
	msg.Data = body
	msg.Header.Set(nats.MsgIdHdr, "some-other-id")
	if _, err := h.n.JS.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	h.waitState(t, first.JobID, queue.StatePlaced)
	queuetest.Eventually(t, 10*time.Second, "the submissions to be consumed", func() bool {
		return queuetest.StreamMessages(t, h.n.JS, queue.StreamSubmit) == 0
	})
	if n := h.countJobs(t); n != 1 {
		t.Fatalf("want 1 job, got %d", n)
	}
	if n := len(queuetest.RunMessages(t, h.n.JS)); n != 1 {
		t.Fatalf("want 1 run message, got %d", n)
	}
}

func TestSameMsgIDYieldsOneJob(t *testing.T) {
	t.Parallel()
	h := startScheduler(t, &recordingPlacer{})
	ctx := context.Background()
	for i := range 2 {
		msg := nats.NewMsg(queue.SubmitSubject("default"))
		msg.Data = []byte(`{"command": ["/bin/true"]}`)
		msg.Header.Set(nats.MsgIdHdr, "raw-client-42")
		msg.Header.Set(queue.HeaderJobID, uuid.NewString()) // a careless client changes it
		ack, err := h.n.JS.PublishMsg(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 && !ack.Duplicate {
			t.Fatal("JetStream must report the second publish as a duplicate")
		}
	}
	queuetest.Eventually(t, 10*time.Second, "a job to be placed", func() bool {
		jobs, _ := h.store.List(ctx, queue.ListFilter{State: queue.StatePlaced})
		return len(jobs) == 1
	})
	if n := h.countJobs(t); n != 1 {
		t.Fatalf("want 1 job, got %d", n)
	}
}

func TestMalformedSubmissionsChangeNothing(t *testing.T) {
	t.Parallel()
	placer := &recordingPlacer{}
	h := startScheduler(t, placer)
	ctx := context.Background()
	bad := &queue.Spec{Project: "default"} // no command
	if _, err := queue.Submit(ctx, h.n.JS, bad); !errors.Is(err, queue.ErrInvalidSpec) {
		t.Fatalf("want ErrInvalidSpec, got %v", err)
	}
	if n := queuetest.StreamMessages(t, h.n.JS, queue.StreamSubmit); n != 0 {
		t.Fatalf("a refused submission must publish nothing, found %d messages", n)
	}
	// A raw publisher bypasses the client's validation: the scheduler
	// refuses the message and records nothing.
	for _, body := range []string{`{"command": []}`, `{"command": ["x"], "gpus": 1}`, `not json at all: [`} {
		if _, err := h.n.JS.Publish(ctx, queue.SubmitSubject("default"), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	queuetest.Eventually(t, 10*time.Second, "the raw submissions to be consumed", func() bool {
		return queuetest.StreamMessages(t, h.n.JS, queue.StreamSubmit) == 0
	})
	if n := h.countJobs(t); n != 0 {
		t.Fatalf("malformed submissions must record nothing, found %d jobs", n)
	}
	var projects int
	h.store.DB.QueryRow(`SELECT count(*) FROM projects`).Scan(&projects) //nolint:errcheck // checked below
	if projects != 0 || len(queuetest.RunMessages(t, h.n.JS)) != 0 || placer.calls != 0 {
		t.Fatalf("malformed submissions must change nothing: projects %d, placer calls %d", projects, placer.calls)
	}
}

// A bad submission among good ones holds none of them back: each good one
// is recorded and dispatched once, each bad one consumed and recorded
// nowhere (invariant 7).
func TestBadSubmissionsAmongGoodOnesHoldNoneOfThemBack(t *testing.T) {
	t.Parallel()
	h := startScheduler(t, &recordingPlacer{})
	ctx := context.Background()
	var good []uuid.UUID
	for i := range 4 {
		for _, body := range []string{`{"command": []}`, `not json at all: [`, `{"command": ["x"], "resources": {"gpu": {"count": 99}}}`} {
			if _, err := h.n.JS.Publish(ctx, queue.SubmitSubject("default"), []byte(body)); err != nil {
				t.Fatal(err)
			}
		}
		good = append(good, h.submit(t, fmt.Sprintf("good-%d", i)))
	}
	for _, id := range good {
		h.waitState(t, id, queue.StatePlaced)
	}
	queuetest.Eventually(t, 10*time.Second, "every submission to be consumed", func() bool {
		return queuetest.StreamMessages(t, h.n.JS, queue.StreamSubmit) == 0
	})
	if n := h.countJobs(t); n != len(good) {
		t.Errorf("%d jobs recorded, want the %d good submissions only", n, len(good))
	}
	runs := queuetest.RunMessages(t, h.n.JS)
	for _, id := range good {
		if subject := queue.RunSubject("p1", id.String()); runs[subject] != 1 {
			t.Errorf("job %s: %d run messages, want 1 (all: %v)", id, runs[subject], runs)
		}
	}
}

func TestUnplaceableJobIsRejectedWithTheReason(t *testing.T) {
	t.Parallel()
	h := startScheduler(t, &recordingPlacer{})
	sub, err := queue.Submit(context.Background(), h.n.JS, mustSpec(t, "name: reject-me\ncommand: [/bin/true]\n"))
	if err != nil {
		t.Fatal(err)
	}
	job := h.waitState(t, sub.JobID, queue.StateRejected)
	if job.Reason != "no pool fits" || job.FinalizedAt == nil {
		t.Fatalf("rejection not recorded with its reason: %+v", job)
	}
	if len(queuetest.RunMessages(t, h.n.JS)) != 0 {
		t.Fatal("a rejected job must not be dispatched")
	}
}

func TestPolicyPlacerRejectsOutsideResidencyAndExplainsWhy(t *testing.T) {
	t.Parallel()
	provider, err := local.New([]local.PoolConfig{
		{Pool: "us-cpu", Region: "us-east-1", Country: "US", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: "on-demand", PricePerHour: "0.05"},
		{Pool: "de-cpu", Region: "eu-central-1", Country: "DE", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: "on-demand", PricePerHour: "0.10"},
	})
	if err != nil {
		t.Fatal(err)
	}
	placer := &control.PolicyPlacer{Sources: []adapters.OfferSource{provider}}
	job := &queue.Job{Spec: mustSpec(t, "command: [/bin/true]\nplacement: {residency: EU}\n")}
	p, err := placer.Place(context.Background(), job, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Pool != "de-cpu" || p.Residency != "EU" || len(p.Countries) != 27 {
		t.Fatalf("want the German pool under EU residency, got %+v", p)
	}
	var d policy.Compact
	if err := json.Unmarshal(p.Decision, &d); err != nil || d.Rejected != 1 || len(d.Reasons) != 1 ||
		d.Reasons[0].Code != "residency" || len(d.Reasons[0].Examples) != 1 || d.Reasons[0].Examples[0].Pool != "us-cpu" {
		t.Fatalf("the decision must record the rejected US offer and why: %s", p.Decision)
	}
	job = &queue.Job{Spec: mustSpec(t, "command: [/bin/true]\nplacement: {residency: EU, regions: [us-*]}\n")}
	_, err = placer.Place(context.Background(), job, nil)
	var rej *queue.RejectionError
	if !errors.As(err, &rej) {
		t.Fatalf("want a rejection, got %v", err)
	}
	// A class the rules do not define is named by the spec's key.
	job = &queue.Job{Spec: mustSpec(t, "command: [/bin/true]\nplacement: {residency: EUU}\n")}
	_, err = placer.Place(context.Background(), job, nil)
	if !errors.As(err, &rej) || !strings.HasPrefix(rej.Reason, `spec.placement.residency: undefined residency class "EUU"; known classes: EU, EEA, CH, UK`) {
		t.Fatalf("want a rejection naming spec.placement.residency, got %v", err)
	}
}

func TestReconcilerRepublishesARecordedJobWithNoMessage(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	store, _ := queuetest.Store(t, n)
	ctx := context.Background()
	// A job recorded and placed whose publish never happened (the process
	// died between the commit and the publish), and one never placed.
	placed := placedJob(t, store)
	pending := uuid.New()
	if _, err := store.RecordJobs(ctx, []queue.NewJob{{ID: pending, Spec: mustSpec(t, "command: [/bin/true]")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DB.Exec(`UPDATE jobs SET updated_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	rec := &control.Reconciler{JS: n.JS, Store: store, Placer: &recordingPlacer{}}
	repaired, err := rec.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if repaired != 2 {
		t.Fatalf("want 2 jobs repaired, got %d", repaired)
	}
	msgs := queuetest.RunMessages(t, n.JS)
	if msgs[queue.RunSubject("p", placed.String())] != 1 || msgs[queue.RunSubject("p1", pending.String())] != 1 {
		t.Fatalf("run messages after reconciling: %v", msgs)
	}
	// A second pass finds the messages and publishes nothing more.
	if _, err := store.DB.Exec(`UPDATE jobs SET updated_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	if repaired, err := rec.Pass(ctx); err != nil || repaired != 0 {
		t.Fatalf("second pass: repaired %d, %v", repaired, err)
	}
}

// brokenPlacements is the real store, except that reading one job's
// placement fails.
type brokenPlacements struct {
	*store.Store
	broken uuid.UUID
}

func (b brokenPlacements) LatestPlacement(ctx context.Context, id uuid.UUID) (*queue.Placement, error) {
	if id == b.broken {
		return nil, errors.New("placement row unreadable")
	}
	return b.Store.LatestPlacement(ctx, id)
}

func TestReconcilerSkipsAndReportsAFailingJobAndRepairsTheOthers(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	ctx := context.Background()
	bad, good := placedJob(t, s), placedJob(t, s)
	if _, err := s.DB.Exec(`UPDATE jobs SET updated_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	rec := &control.Reconciler{JS: n.JS, Store: brokenPlacements{Store: s, broken: bad}, Placer: &recordingPlacer{}}
	repaired, err := rec.Pass(ctx)
	var skipped *control.SkippedJobsError
	if !errors.As(err, &skipped) || len(skipped.Jobs) != 1 || skipped.Jobs[bad] == nil || !strings.Contains(err.Error(), bad.String()) {
		t.Fatalf("want the failing job %s skipped and reported, got %v", bad, err)
	}
	if repaired != 1 {
		t.Fatalf("want the other job repaired, got %d repaired", repaired)
	}
	msgs := queuetest.RunMessages(t, n.JS)
	if msgs[queue.RunSubject("p", good.String())] != 1 || msgs[queue.RunSubject("p", bad.String())] != 0 {
		t.Fatalf("run messages after reconciling: %v", msgs)
	}
}
