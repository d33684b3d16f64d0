package workers_test

import (
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
// the other. The second signal must not kill the worker while it hands its
// job back: the job gets its grace, its final checkpoint is recorded, and
// the next attempt resumes from it.
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
	if len(attempts) != 1 || attempts[0].Outcome != queue.OutcomePreempted {
		t.Fatalf("want attempt 1 handed back as preempted, got %+v; events:\n%s", attempts, trail(t, c, id))
	}
	c.startDevWorker(t)
	c.waitState(t, id, queue.StateSucceeded, 2*time.Minute)
	if logs := c.logs(t, id); !strings.Contains(logs, "resumed=1 step=") || strings.Contains(logs, "step=0\n") {
		t.Fatalf("attempt 2 must resume from the checkpoint committed after SIGINT; logs:\n%s", logs)
	}
}
