package workers_test

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// slowToStopJob takes a second after SIGTERM to commit its final
// checkpoint, and resumes from it.
const slowToStopJob = `step=0
[ "$GPUQ_RESUMED" = 1 ] && step=$(cat "$GPUQ_CHECKPOINT_DIR/step")
if [ "$GPUQ_ATTEMPT" != 1 ]; then echo "resumed=${GPUQ_RESUMED:-0} step=$step"; exit 0; fi
trap 'sleep 1; echo $step > "$GPUQ_CHECKPOINT_DIR/step"; gpuq checkpoint save >/dev/null; exit 143' TERM
echo counting
while :; do step=$((step+1)); sleep 0.1; done
`

// Ctrl-C in a terminal reaches every process of its group: a worker under
// gpuq dev gets SIGINT from the terminal and SIGTERM from dev, one after
// the other. The second signal must not kill the worker while it
// hands its job back: the job gets its grace, its final checkpoint is
// recorded, and the next attempt resumes from it. The worker was told to
// stop, so the attempt ends shutdown: not a preemption of the job or of
// its pool.
func TestAWorkerStoppingOnCtrlCOutlivesTheSIGTERMThatFollows(t *testing.T) {
	t.Parallel()
	c := newServerCluster(t)
	w, _ := c.startDevWorker(t)
	id := c.submit(t, "name: counter\ncommand: [/bin/sh, -c, "+strconv.Quote(slowToStopJob)+"]\n")
	queuetest.Eventually(t, time.Minute, "the job to count", func() bool { return strings.Contains(c.logs(t, id), "counting") })
	if err := w.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	w.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
	select {
	case <-w.Done():
	case <-time.After(time.Minute):
		t.Fatal("the worker did not exit within a minute")
	}
	if err := w.Wait(); err != nil {
		t.Fatalf("the worker must exit on its own after handing its job back, got %v", err)
	}
	attempts := c.attempts(t, id)
	if len(attempts) != 1 || attempts[0].Outcome != queue.OutcomeShutdown {
		t.Fatalf("want attempt 1 handed back as shutdown, got %+v; events:\n%s", attempts, trail(t, c, id))
	}
	if tr := trail(t, c, id); !strings.Contains(tr, "was told to stop; handing the job back") || strings.Contains(tr, "preemption notice") {
		t.Fatalf("the trail must say the worker was told to stop, not that it was preempted:\n%s", tr)
	}
	job, err := c.store.Job(context.Background(), id)
	if err != nil || job.Preemptions != 0 || job.Errors != 0 {
		t.Fatalf("a shutdown counts as neither a preemption nor an error: %+v, %v", job, err)
	}
	if pools, err := c.store.PoolSummaries(context.Background(), time.Time{}); err != nil || pools[testPool.Pool].Preemptions != 0 {
		t.Fatalf("a shutdown must not count against the pool: %+v, %v", pools[testPool.Pool], err)
	}
	c.startDevWorker(t)
	c.waitState(t, id, queue.StateSucceeded, 2*time.Minute)
	if logs := c.logs(t, id); !strings.Contains(logs, "resumed=1 step=") || strings.Contains(logs, "step=0\n") {
		t.Fatalf("attempt 2 must resume from the checkpoint committed after SIGINT; logs:\n%s", logs)
	}
}

// Where the provider's notice comes from its metadata service (here
// --notice aws), or where there is none (gpuq dev's workers run with
// --notice none), SIGTERM is someone stopping the worker (systemctl stop,
// gpuq dev stopping), not the machine going away: the job is handed back
// as shutdown. Where SIGTERM is the notice (a container cloud), it is
// handed back as preempted.
func TestSIGTERMIsAShutdownUnlessItIsTheProvidersNotice(t *testing.T) {
	t.Parallel()
	c := newServerCluster(t)
	for _, tc := range []struct {
		notice string
		want   string
	}{{"aws", queue.OutcomeShutdown}, {"none", queue.OutcomeShutdown}, {"sigterm", queue.OutcomePreempted}} {
		// An unreachable metadata service: the aws watcher never
		// announces anything.
		w := c.startPoolWorker(t, testPool, 30*time.Second, 5*time.Second, "--notice", tc.notice, "--notice-endpoint", "http://127.0.0.1:1")
		id := c.submit(t, "name: counter\ncommand: [/bin/sh, -c, "+strconv.Quote(slowToStopJob)+"]\n")
		queuetest.Eventually(t, time.Minute, "the job to count", func() bool { return strings.Contains(c.logs(t, id), "counting") })
		if err := w.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.Done():
		case <-time.After(time.Minute):
			t.Fatalf("--notice %s: the worker did not exit within a minute", tc.notice)
		}
		if attempts := c.attempts(t, id); len(attempts) != 1 || attempts[0].Outcome != tc.want {
			t.Fatalf("--notice %s: want attempt 1 handed back as %s, got %+v; events:\n%s", tc.notice, tc.want, attempts, trail(t, c, id))
		}
		if err := c.store.Cancel(context.Background(), id, "test done"); err != nil {
			t.Fatal(err)
		}
	}
}
