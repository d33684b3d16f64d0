package workers_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// A worker whose own machine fails around a run (here it cannot make the
// attempt's directory) hands the job back as a host error: the job resumes
// in its pool, its placement stands, and the pool's preemption record,
// which placement and the spot strategy read, counts nothing.
func TestAHostErrorHandsTheJobBackInItsPoolWithoutCountingAPreemptionThere(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	id := c.submit(t, "name: host-error\ncommand: [/bin/true]\n")
	c.waitState(t, id, queue.StatePlaced, 30*time.Second)
	dataDir := jobsDir(t)
	blockFirstAttempt(t, dataDir, id)
	c.startWorkerIn(t, dataDir)
	job := c.waitState(t, id, queue.StateSucceeded, 60*time.Second)
	attempts := c.attempts(t, id)
	if len(attempts) != 2 || attempts[0].Outcome != queue.OutcomeHostError || attempts[1].Outcome != queue.OutcomeSucceeded {
		t.Fatalf("want attempt 1 a host error and attempt 2 succeeded, got %+v", attempts)
	}
	if attempts[1].Pool != attempts[0].Pool || job.PlacementVersion != 1 {
		t.Fatalf("a host error must leave the job in its pool under its placement: attempts in %s then %s, placement v%d",
			attempts[0].Pool, attempts[1].Pool, job.PlacementVersion)
	}
	if job.Preemptions != 1 || job.Errors != 0 {
		t.Fatalf("a host error counts against retries.max_preemptions and not max_errors: %d preemptions, %d errors", job.Preemptions, job.Errors)
	}
	if tr := trail(t, c, id); !strings.Contains(tr, "1 host error on ") || !strings.Contains(tr, "preparing directories: ") {
		t.Fatalf("the trail must say the worker's machine failed, and how:\n%s", tr)
	}
	pools, err := c.store.PoolSummaries(context.Background(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if p := pools[attempts[0].Pool]; p.Preemptions != 0 {
		t.Fatalf("pool %s counted %d preemptions for a host error", attempts[0].Pool, p.Preemptions)
	}
}

// A worker whose machine fails three jobs in a row takes no work for a
// while, rather than be the first free for every job of its pool and hand
// each back.
func TestAWorkerWhoseMachineFailsJobsInARowTakesNoWorkForAWhile(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dataDir := jobsDir(t)
	var broken []uuid.UUID
	for range 3 {
		id := c.submit(t, "name: host-error\ncommand: [/bin/true]\n")
		c.waitState(t, id, queue.StatePlaced, 30*time.Second)
		blockFirstAttempt(t, dataDir, id)
		broken = append(broken, id)
	}
	logPath := c.startWorkerIn(t, dataDir)
	queuetest.Eventually(t, 30*time.Second, "the worker to pause after three host errors", func() bool {
		out, _ := os.ReadFile(logPath)
		return strings.Contains(string(out), "this worker takes no work for a while")
	})
	beats := make(chan *nats.Msg, 64)
	sub, err := c.n.NC.ChanSubscribe(queue.AliveSubject(testPool.Pool), beats)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // the test ends
	// Its beats say so, naming the last host error, for the control plane
	// to count it apart and the autoscaler to replace its machine.
	var paused queue.BeatSender
	queuetest.Eventually(t, 5*time.Second, "a beat saying the worker is paused", func() bool {
		for {
			select {
			case m := <-beats:
				s, err := queue.DecodeBeatSender(m.Data)
				if err == nil && s.PausedUntil != nil {
					paused = s
					return true
				}
			default:
				return false
			}
		}
	})
	if left := time.Until(*paused.PausedUntil); left <= 0 || left > 30*time.Second || !strings.Contains(paused.PauseReason, "preparing directories: ") {
		t.Fatalf("a paused worker's beat: paused for %s more, because %q; want at most 30 s and the last host error", left, paused.PauseReason)
	}
	for _, id := range broken {
		if a := c.attempts(t, id); len(a) != 1 || a[0].Outcome != queue.OutcomeHostError {
			t.Fatalf("job %s: want one attempt, a host error, got %+v", id, a)
		}
	}
	id := c.submit(t, "name: healthy\ncommand: [/bin/true]\n")
	c.waitState(t, id, queue.StatePlaced, 30*time.Second)
	// The pause lasts hostPauseFirst (30 s); without it the worker, idle,
	// claims a job within milliseconds.
	time.Sleep(2 * time.Second)
	if a := c.attempts(t, id); len(a) != 0 {
		t.Fatalf("a paused worker claimed a job: %+v", a)
	}
}

// blockFirstAttempt puts a file where the job's attempt 1 makes its
// directory in dataDir, so that the worker cannot prepare it.
func blockFirstAttempt(t *testing.T, dataDir string, id uuid.UUID) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dataDir, id.String()+"-a1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// startWorkerIn starts a worker of the test pool as startWorker does, with
// dataDir as its data directory (the test must know where attempts'
// directories go), and returns the path of its log.
func (c *cluster) startWorkerIn(t *testing.T, dataDir string) string {
	t.Helper()
	_, logPath := c.launch(t, &local.Launcher{Executable: gpuqBin,
		Args: []string{"--nats-url", c.natsURL(), "--ack-wait", "30s", "--grace", "2s", "--data-dir", dataDir}}, testPool)
	return logPath
}
