package control_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
)

// A job that runs after others (spec.after) is recorded waiting, with no
// pool and no run message, until every one of them has succeeded, in
// whatever order they end; then it is placed and published like any job.
// The reconciler never places a waiting job. One whose job to run after
// fails is cancelled with the reason; its retry is refused while that job
// stays failed, waits again while it runs again, and runs after it
// succeeds. A job named before its own submission is recorded waits for
// it; one naming no job of its project is rejected.
func TestAJobRunsOnlyAfterEveryJobItNamesHasSucceeded(t *testing.T) {
	t.Parallel()
	n, st, placer, ctx := scheduling(t, "p")
	seq := &control.Sequencer{JS: n.JS, Store: st, Placer: placer, Interval: 100 * time.Millisecond}
	go seq.Run(ctx) //nolint:errcheck // ends with ctx
	client := &control.Client{Store: st, JS: n.JS, NATS: n.NC, Placer: placer, Runs: n.JS}

	submit := func(yaml string) uuid.UUID {
		t.Helper()
		sub, err := queue.Submit(ctx, n.JS, mustSpec(t, yaml))
		if err != nil {
			t.Fatal(err)
		}
		return sub.JobID
	}
	stateOf := func(id uuid.UUID) *queue.Job {
		t.Helper()
		j, err := st.Job(ctx, id)
		if err != nil && !errors.Is(err, queue.ErrNotFound) {
			t.Fatal(err)
		}
		return j
	}
	await := func(id uuid.UUID, want queue.JobState) *queue.Job {
		t.Helper()
		var j *queue.Job
		queuetest.Eventually(t, 20*time.Second, fmt.Sprintf("job %s %s", id, want), func() bool {
			j = stateOf(id)
			return j != nil && j.State == want
		})
		return j
	}
	finish := func(id uuid.UUID, ok bool) {
		t.Helper()
		j := await(id, queue.StatePlaced)
		c, err := st.Claim(ctx, queue.ClaimRequest{JobID: id, PlacementVersion: j.PlacementVersion, Lease: time.Minute, WorkerID: "w", Host: "h", PID: 1, Pool: "p", Country: "DE"})
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			err = st.Succeed(ctx, id, c.Job.Attempt, nil)
		} else {
			exit := 3
			err = st.Fail(ctx, id, c.Job.Attempt, queue.OutcomeFailed, &exit, "exited with status 3")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	runs := func(id uuid.UUID) uint64 {
		return queuetest.RunMessages(t, n.JS)[queue.RunSubject("p", id.String())]
	}
	const cmd = "command: [/bin/true]\nplacement: {tier: spot}\n"

	a, b := submit(cmd+"name: a\n"), submit(cmd+"name: b\n")
	await(a, queue.StatePlaced)
	await(b, queue.StatePlaced)
	c := submit(fmt.Sprintf("%sname: c\nafter: [%s, %s]\n", cmd, a, b))
	job := await(c, queue.StateWaiting)
	if job.Pool != "" || job.PlacementVersion != 0 {
		t.Fatalf("a waiting job: %+v, want no pool and no placement", job)
	}
	trail, err := st.EventsOf(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if last := trail[len(trail)-1]; last.State != queue.StateWaiting || !strings.Contains(last.Message, "waiting for 2 of the 2 jobs it runs after to succeed") ||
		!strings.Contains(last.Message, a.String()+" (a) placed") {
		t.Fatalf("the waiting job's trail ends %+v", last)
	}
	// The reconciler places a pending job that waited too long: not a
	// waiting one.
	rec := &control.Reconciler{JS: n.JS, Store: st, Placer: placer, PendingAge: time.Nanosecond, PlacedAge: time.Hour}
	if _, err := rec.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	finish(b, true)
	if _, err := seq.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if j := stateOf(c); j.State != queue.StateWaiting || runs(c) != 0 {
		t.Fatalf("job c with a still placed and b succeeded: %s with %d run messages, want waiting with none", j.State, runs(c))
	}
	st2, err := client.Status(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(st2.After) != 2 || st2.After[0].ID != a || st2.After[0].State != queue.StatePlaced || st2.After[1].Name != "b" || st2.After[1].State != queue.StateSucceeded {
		t.Fatalf("status of c: after %+v", st2.After)
	}
	finish(a, true)
	job = await(c, queue.StatePlaced)
	if job.Pool != "p" || job.PlacementVersion != 1 {
		t.Fatalf("job c once a and b succeeded: %+v", job)
	}
	queuetest.Eventually(t, 10*time.Second, "c's run message", func() bool { return runs(c) == 1 })

	// A job whose jobs to run after have all succeeded is placed at once.
	d := submit(fmt.Sprintf("%sname: d\nafter: [%s]\n", cmd, a))
	await(d, queue.StatePlaced)

	// A job to run after fails: the job waiting for it is cancelled, and
	// a new one naming it is rejected, each saying why.
	e := submit(cmd + "name: e\n")
	f := submit(fmt.Sprintf("%sname: f\nafter: [%s]\n", cmd, e))
	await(f, queue.StateWaiting)
	finish(e, false)
	job = await(f, queue.StateCancelled)
	want := fmt.Sprintf("job %s (e) it runs after ended failed: retry it (gpuq retry %[1]s), then this job", e)
	if job.Reason != want {
		t.Fatalf("the cancelled job's reason: %q, want %q", job.Reason, want)
	}
	g := submit(fmt.Sprintf("%sname: g\nafter: [%s]\n", cmd, e))
	if job = await(g, queue.StateRejected); job.Reason != want {
		t.Fatalf("a job submitted after the one it runs after failed: reason %q, want %q", job.Reason, want)
	}
	var rej *queue.RejectionError
	if _, err := client.Retry(ctx, f, false); !errors.As(err, &rej) || rej.Reason != want {
		t.Fatalf("retrying f while e stays failed: %v, want a rejection saying %q", err, want)
	}
	if j := stateOf(f); j.State != queue.StateCancelled {
		t.Fatalf("a refused retry changed f: %s", j.State)
	}
	if _, err := client.Retry(ctx, e, false); err != nil {
		t.Fatal(err)
	}
	if job, err = client.Retry(ctx, f, false); err != nil || job.State != queue.StateWaiting {
		t.Fatalf("retrying f while e runs again: %+v, %v; want it waiting", job, err)
	}
	finish(e, true)
	await(f, queue.StatePlaced)

	// Named before its own submission is recorded: the job waits for it
	// (the scheduler handles the submission again a moment later).
	later := mustSpec(t, cmd+"name: later\nidempotency_key: later\n")
	h := submit(fmt.Sprintf("%sname: h\nafter: [%s]\n", cmd, queue.JobIDFor(later)))
	time.Sleep(300 * time.Millisecond)
	if _, err := queue.Submit(ctx, n.JS, later); err != nil {
		t.Fatal(err)
	}
	await(h, queue.StateWaiting)

	// No job of its project: rejected, whether the id names no job or
	// another project's, with the same words.
	other := submit(cmd + "project: other\n")
	await(other, queue.StatePlaced)
	for _, dep := range []uuid.UUID{uuid.New(), other} {
		i := submit(fmt.Sprintf("%safter: [%s]\n", cmd, dep))
		job = await(i, queue.StateRejected)
		if want := fmt.Sprintf("job %s it runs after is not a job of project default", dep); job.Reason != want {
			t.Fatalf("a job after %s: reason %q, want %q", dep, job.Reason, want)
		}
	}
	// A user may cancel a waiting job.
	if err := client.Cancel(ctx, h); err != nil {
		t.Fatal(err)
	}
	await(h, queue.StateCancelled)
}

var _ control.SequencerStore = (*store.Store)(nil)
