package workers_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/workers"
)

// A job whose latest checkpoint is recorded but whose archive is gone from
// its bucket (an operator emptied it, or it was lost) cannot resume as
// promised, and every worker of the pool would miss it again: the job fails
// at once, its reason naming the checkpoint and the archive, rather than go
// round the pool as preempted until it is declared dead.
func TestAJobWhoseCheckpointArchiveIsGoneFailsSayingSoRatherThanGoRoundThePool(t *testing.T) {
	t.Parallel()
	c := newServerCluster(t)
	c.startDevWorker(t)
	proceed := filepath.Join(jobWritable(t), "go")
	id := c.submit(t, `name: loses-its-checkpoint
command: [/bin/sh, -c, 'echo "start attempt=$GPUQ_ATTEMPT"; echo 1 > "$GPUQ_CHECKPOINT_DIR/step"; gpuq checkpoint save; while [ ! -e `+proceed+` ]; do sleep 0.1; done; exit 3']
retries: {delay: 1s}
`)
	ctx := context.Background()
	var cps []queue.Checkpoint
	queuetest.Eventually(t, 60*time.Second, "the job's checkpoint to be recorded", func() bool {
		cps, _ = c.store.Checkpoints(ctx, id)
		return len(cps) == 1
	})
	if err := (&workers.ObjectStore{JS: c.n.JS}).Delete(ctx, cps[0].StoreURI); err != nil {
		t.Fatal(err)
	}
	// The job exits with an error; its retry would resume from checkpoint 1.
	if err := os.WriteFile(proceed, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	job := c.waitState(t, id, queue.StateFailed, 60*time.Second)
	for _, want := range []string{"restoring checkpoint 1", cps[0].StoreURI, "archive lost: not in its bucket", "the job was not run"} {
		if !strings.Contains(job.Reason, want) {
			t.Errorf("the job's reason must say %q; got %q", want, job.Reason)
		}
	}
	attempts := c.attempts(t, id)
	if len(attempts) != 2 || attempts[0].Outcome != queue.OutcomeRetry || attempts[1].Outcome != queue.OutcomeFailed {
		t.Errorf("want attempt 1 ended in error and attempt 2 failed at its restore, got %+v", attempts)
	}
	if logs := c.logs(t, id); strings.Count(logs, "start attempt=") != 1 {
		t.Errorf("only attempt 1 may have started the job; logs:\n%s", logs)
	}
}

// gpuq results of a succeeded job whose outputs archive is gone from its
// bucket exits 1 saying so, and writes nothing.
func TestResultsOfAJobWhoseOutputsArchiveIsGoneSayWhy(t *testing.T) {
	t.Parallel()
	c := newServerCluster(t)
	c.startDevWorker(t)
	id := c.submit(t, `command: [/bin/sh, -c, 'echo 42 > "$GPUQ_OUTPUT_DIR/answer.txt"']`+"\n")
	c.waitState(t, id, queue.StateSucceeded, 60*time.Second)
	ctx := context.Background()
	rec, err := c.store.Result(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&workers.ObjectStore{JS: c.n.JS}).Delete(ctx, rec.StoreURI); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "out")
	_, errOut := gpuq(t, 1, "results", id.String(), "--dir", dir, "--nats-url", c.n.URL)
	if want := "downloading the outputs of job " + id.String() + ": the job's outputs are recorded, but downloading " + rec.StoreURI + ": archive lost: not in its bucket"; !strings.Contains(errOut, want) {
		t.Errorf("gpuq results must say %q; stderr:\n%s", want, errOut)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("gpuq results of a lost archive must write nothing; %s: %v", dir, err)
	}
}
