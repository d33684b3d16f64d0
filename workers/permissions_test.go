package workers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// A submitter of teama publishes, raw, a spec that says project teamb: the
// job is recorded rejected under teama, the reason shows in gpuq status,
// and teamb's project holds nothing of it.
func TestSubmissionForAnotherProjectIsRejectedWithTheReason(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startWorker(t, 5*time.Second, time.Second)
	nc := queuetest.Connect(t, c.n.SubmitterURL(t, "teama"), nil)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(queue.SubmitSubject("teama"))
	msg.Data = []byte(`{"project": "teamb", "name": "forged", "idempotency_key": "k1", "command": ["true"]}`)
	ack, err := js.PublishMsg(context.Background(), msg)
	if err != nil {
		t.Fatalf("a submitter of teama publishing on its own subject: %v", err)
	}
	var job *queue.Job
	queuetest.Eventually(t, 20*time.Second, "the forged submission to be recorded", func() bool {
		jobs, err := c.store.List(context.Background(), queue.ListFilter{Project: "teama"})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 1 {
			job = jobs[0]
		}
		return job != nil && job.State.Terminal()
	})
	if job.State != queue.StateRejected || job.Project != "teama" || !strings.Contains(job.Reason, `spec.project "teamb"`) {
		t.Fatalf("want the job rejected under teama with the reason, got %s in %s: %q (stream seq %d)", job.State, job.Project, job.Reason, ack.Sequence)
	}
	if other, err := c.store.List(context.Background(), queue.ListFilter{Project: "teamb"}); err != nil || len(other) != 0 {
		t.Fatalf("teamb holds %d jobs (%v)", len(other), err)
	}
	// Its idempotency key names no job of teamb's.
	if job.ID == queue.JobIDFor(&queue.Spec{Project: "teamb", IdempotencyKey: "k1"}) {
		t.Fatal("the rejected job took the id teamb's key k1 names")
	}
	out := runCLI(t, 0, "status", job.ID.String(), "--project", "teama", "--nats-url", c.n.URL)
	for _, want := range []string{"rejected", `spec.project "teamb" differs from the project "teama"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("gpuq status must show %q; got:\n%s", want, out)
		}
	}
	if len(queuetest.RunMessages(t, c.n.JS)) != 0 {
		t.Fatal("a rejected submission was dispatched")
	}
}
