package control_test

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// A job that died of preemptions on the only pool that takes it is retried
// on that pool: a re-placement would avoid the pool that just preempted
// it, and find nowhere to go. The retry publishes the job's run message
// under its new placement, and its events are in the events stream when
// the retry answers.
func TestARetryGoesBackToThePoolThatPreemptedTheJobWhenNoOtherTakesIt(t *testing.T) {
	t.Parallel()
	n, st, placer, ctx := scheduling(t, "spot-a")
	sub, err := queue.Submit(ctx, n.JS, mustSpec(t, "command: [/bin/true]\nplacement: {tier: spot}\n"))
	if err != nil {
		t.Fatal(err)
	}
	id := sub.JobID
	queuetest.Eventually(t, 20*time.Second, "the job placed", func() bool {
		j, err := st.Job(ctx, id)
		return err == nil && j.State == queue.StatePlaced
	})
	c, err := st.Claim(ctx, queue.ClaimRequest{JobID: id, PlacementVersion: 1, Lease: time.Minute, WorkerID: "w", Host: "h", PID: 1, Pool: "spot-a", Country: "DE"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.MarkDead(ctx, id, c.Job.Attempt, "preempted 21 times, over retries.max_preemptions 20"); err != nil {
		t.Fatal(err)
	}
	// The scheduler publishes the first run message after its commit:
	// counted once it is there, so that it is not taken for the retry's.
	subject := queue.RunSubject("spot-a", id.String())
	queuetest.Eventually(t, 20*time.Second, "the first run message", func() bool {
		return queuetest.RunMessages(t, n.JS)[subject] == 1
	})
	runs := uint64(1)

	client := &control.Client{Store: st, JS: n.JS, NATS: n.NC}
	if _, err := client.Retry(ctx, id, false); err != control.ErrRetryUnavailable {
		t.Fatalf("a client without a placer: want ErrRetryUnavailable, got %v", err)
	}
	client.Placer, client.Runs = placer, n.JS
	job, err := client.Retry(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	if job.State != queue.StatePlaced || job.Pool != "spot-a" || job.PlacementVersion != 2 || job.Preemptions != 0 {
		t.Fatalf("retried job: %+v", job)
	}
	if got := queuetest.RunMessages(t, n.JS)[subject]; got != runs+1 {
		t.Fatalf("run messages of the job on spot-a: %d after the retry, want %d", got, runs+1)
	}
	var latest queue.Event
	queue.FollowEvents(ctx, n.JS, id, func(ev queue.Event) bool { latest = ev; return false }) //nolint:errcheck // reads the latest
	if latest.State.Terminal() {
		t.Fatalf("the latest event once the retry answered: %+v, want the retry's", latest)
	}
}
