package control_test

import (
	"context"
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
	x := newSequencing(t)
	n, st, ctx, seq, client, placer := x.n, x.st, x.ctx, x.seq, x.client, x.placer
	submit, stateOf, await, finish, runs := x.submit, x.stateOf, x.await, x.finish, x.runs
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
	f2 := submit(fmt.Sprintf("%sname: f2\nafter: [%s]\n", cmd, f))
	await(f2, queue.StateWaiting)
	finish(e, false)
	job = await(f, queue.StateCancelled)
	want := fmt.Sprintf("job %s (e) it runs after ended failed: retry it and the jobs after it (gpuq retry --downstream %[1]s)", e)
	if job.Reason != want {
		t.Fatalf("the cancelled job's reason: %q, want %q", job.Reason, want)
	}
	// The job after f, cancelled in turn, names e too: that is the job to
	// retry, not f.
	if job = await(f2, queue.StateCancelled); job.Reason != want {
		t.Fatalf("the reason of the job after f: %q, want %q", job.Reason, want)
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

// sequencing is a scheduler and a sequencer on real PostgreSQL and
// JetStream, for jobs that run after others, with pool p and steps that
// submit, await and end jobs there.
type sequencing struct {
	t      *testing.T
	n      *queuetest.NATS
	st     *store.Store
	ctx    context.Context
	seq    *control.Sequencer
	client *control.Client
	placer *control.PolicyPlacer
}

func newSequencing(t *testing.T) *sequencing {
	n, st, placer, ctx := scheduling(t, "p")
	seq := &control.Sequencer{JS: n.JS, Store: st, Placer: placer, Interval: 100 * time.Millisecond}
	go seq.Run(ctx) //nolint:errcheck // ends with ctx
	return &sequencing{t: t, n: n, st: st, ctx: ctx, seq: seq, placer: placer, client: &control.Client{Store: st, JS: n.JS, NATS: n.NC, Placer: placer, Runs: n.JS}}
}

func (x *sequencing) submit(yaml string) uuid.UUID {
	x.t.Helper()
	sub, err := queue.Submit(x.ctx, x.n.JS, mustSpec(x.t, yaml))
	if err != nil {
		x.t.Fatal(err)
	}
	return sub.JobID
}

func (x *sequencing) stateOf(id uuid.UUID) *queue.Job {
	x.t.Helper()
	j, err := x.st.Job(x.ctx, id)
	if err != nil && !errors.Is(err, queue.ErrNotFound) {
		x.t.Fatal(err)
	}
	return j
}

func (x *sequencing) await(id uuid.UUID, want queue.JobState) *queue.Job {
	x.t.Helper()
	var j *queue.Job
	queuetest.Eventually(x.t, 20*time.Second, fmt.Sprintf("job %s %s", id, want), func() bool {
		j = x.stateOf(id)
		return j != nil && j.State == want
	})
	return j
}

// finish claims placed job id and records its success, or with ok false
// its failure.
func (x *sequencing) finish(id uuid.UUID, ok bool) {
	x.t.Helper()
	j := x.await(id, queue.StatePlaced)
	c, err := x.st.Claim(x.ctx, queue.ClaimRequest{JobID: id, PlacementVersion: j.PlacementVersion, Lease: time.Minute, WorkerID: "w", Host: "h", PID: 1, Pool: "p", Country: "DE"})
	if err != nil {
		x.t.Fatal(err)
	}
	if ok {
		err = x.st.Succeed(x.ctx, id, c.Job.Attempt, nil)
	} else {
		exit := 3
		err = x.st.Fail(x.ctx, id, c.Job.Attempt, queue.OutcomeFailed, &exit, "exited with status 3")
	}
	if err != nil {
		x.t.Fatal(err)
	}
}

// runs counts job id's run messages on pool p.
func (x *sequencing) runs(id uuid.UUID) uint64 {
	return queuetest.RunMessages(x.t, x.n.JS)[queue.RunSubject("p", id.String())]
}

// A job that runs after others however they end (spec.after_ended) waits
// until every one of them has ended, succeeded, failed or cancelled, and is
// then placed; beside spec.after, the jobs of that list must still succeed.
func TestAJobRunsAfterTheJobsItNamesHaveEndedHoweverTheyEnded(t *testing.T) {
	t.Parallel()
	x := newSequencing(t)
	const cmd = "command: [/bin/true]\nplacement: {tier: spot}\n"

	prep, a, b, c := x.submit(cmd+"name: prep\n"), x.submit(cmd+"name: lr-a\n"), x.submit(cmd+"name: lr-b\n"), x.submit(cmd+"name: lr-c\n")
	for _, id := range []uuid.UUID{prep, a, b, c} {
		x.await(id, queue.StatePlaced)
	}
	summary := x.submit(fmt.Sprintf("%sname: summary\nafter: [%s]\nafter_ended: [%s, %s, %s]\n", cmd, prep, a, b, c))
	x.await(summary, queue.StateWaiting)
	x.finish(prep, true)
	x.finish(a, false)
	if err := x.client.Cancel(x.ctx, b); err != nil {
		t.Fatal(err)
	}
	x.await(b, queue.StateCancelled)
	if _, err := x.seq.Pass(x.ctx); err != nil {
		t.Fatal(err)
	}
	trail, err := x.st.EventsOf(x.ctx, summary)
	if err != nil {
		t.Fatal(err)
	}
	if j := x.stateOf(summary); j.State != queue.StateWaiting || x.runs(summary) != 0 {
		t.Fatalf("summary with lr-c still placed: %s with %d run messages, want waiting with none", j.State, x.runs(summary))
	}
	if last := trail[len(trail)-1]; !strings.Contains(last.Message, "waiting for 4 of the 4 jobs it runs after to succeed (spec.after) or end (spec.after_ended)") {
		t.Fatalf("summary's trail ends %+v", last)
	}
	st, err := x.client.Status(x.ctx, summary)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := x.client.Status(x.ctx, prep); err != nil || len(st.Dependents) != 1 || st.Dependents[0].ID != summary || st.Dependents[0].State != queue.StateWaiting {
		t.Fatalf("status of prep: %+v, %v; want summary, waiting, as the job after it", st, err)
	}
	if st, err := x.client.Status(x.ctx, b); err != nil || len(st.Dependents) != 1 || st.Dependents[0].Name != "summary" {
		t.Fatalf("status of lr-b: %+v, %v; want summary as the job after it", st, err)
	}
	if len(st.After) != 1 || st.After[0].State != queue.StateSucceeded || len(st.AfterEnded) != 3 ||
		st.AfterEnded[0].State != queue.StateFailed || st.AfterEnded[1].State != queue.StateCancelled || st.AfterEnded[2].Name != "lr-c" {
		t.Fatalf("status of summary: after %+v, after_ended %+v", st.After, st.AfterEnded)
	}
	x.finish(c, false)
	x.await(summary, queue.StatePlaced)
	queuetest.Eventually(t, 10*time.Second, "summary's run message", func() bool { return x.runs(summary) == 1 })

	// Submitted once they have all ended, it is placed at once.
	x.await(x.submit(fmt.Sprintf("%sname: again\nafter_ended: [%s, %s]\n", cmd, a, b)), queue.StatePlaced)

	// A job of after that fails still cancels it.
	d, e := x.submit(cmd+"name: d\n"), x.submit(cmd+"name: e\n")
	f := x.submit(fmt.Sprintf("%sname: f\nafter: [%s]\nafter_ended: [%s]\n", cmd, d, e))
	x.await(f, queue.StateWaiting)
	x.finish(d, false)
	if j := x.await(f, queue.StateCancelled); j.Reason != fmt.Sprintf("job %s (d) it runs after ended failed: retry it and the jobs after it (gpuq retry --downstream %[1]s)", d) {
		t.Fatalf("f after d failed: %q", j.Reason)
	}
	// A waiting job the user cancels has ended: a job after it ended runs.
	g := x.submit(fmt.Sprintf("%sname: g\nafter: [%s]\n", cmd, e))
	h := x.submit(fmt.Sprintf("%sname: h\nafter_ended: [%s]\n", cmd, g))
	x.await(h, queue.StateWaiting)
	if err := x.client.Cancel(x.ctx, g); err != nil {
		t.Fatal(err)
	}
	x.await(h, queue.StatePlaced)

	// No job of its project: rejected, as for after.
	if j := x.await(x.submit(fmt.Sprintf("%safter_ended: [%s]\n", cmd, uuid.New())), queue.StateRejected); !strings.Contains(j.Reason, "it runs after is not a job of project default") {
		t.Fatalf("a job after_ended no job: %q", j.Reason)
	}
}

var _ control.SequencerStore = (*store.Store)(nil)
