package workers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// startDevWorker launches `gpuq worker` for the test pool exactly as `gpuq
// dev` does: the pool's flags, two slots, the NATS URL, --notice none and
// the pool's worker credential in the environment, nothing else, so
// AckWait is the default 30 s. Its temporary directory (where it keeps its attempts by
// default) is the test's; its output is shown if the test fails.
func (c *cluster) startDevWorker(t testing.TB) (*local.Instance, string) {
	t.Helper()
	l := &local.Launcher{Executable: gpuqBin, Slots: 2, Args: []string{"--nats-url", c.natsURL(), "--notice", "none"}, Env: []string{"TMPDIR=" + jobsDir(t)}}
	return c.launch(t, l, testPool)
}

// stateTrail is a job's events as "state/attempt" words, oldest first, and
// the index of the hand-back of a lost attempt (-1 when there is none).
func stateTrail(t *testing.T, c *cluster, id uuid.UUID) (words []string, lostAt int) {
	t.Helper()
	events, err := c.store.EventsOf(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	lostAt = -1
	for i, ev := range events {
		words = append(words, fmt.Sprintf("%s/%d", ev.State, ev.Attempt))
		if ev.State == queue.StatePlaced && ev.Attempt > 0 && strings.Contains(ev.Message, "lost: no liveness beat") {
			lostAt = i
		}
	}
	return words, lostAt
}

// A worker killed without notice is declared lost by `gpuq server`'s
// liveness monitor and its job handed back at once: with the default
// AckWait (30 s), the order of events proves the job came back through the
// hand-back and not through the lapse of the lease and AckWait (a claim
// after a lapsed lease goes from running to running with no hand-back).
func TestSIGKILLedWorkersJobIsHandedBackOnLivenessAndResumesFromItsCheckpoint(t *testing.T) {
	t.Parallel()
	// Every checkpoint is kept, to read back the one attempt 2 resumed.
	c := newServerCluster(t, "storage: {keep_checkpoints: 1000}\n")
	_, id, killed := c.killHolderAfterCheckpoints(t, 60*time.Second, func() *local.Instance { w, _ := c.startDevWorker(t); return w })
	job := c.waitState(t, id, queue.StateSucceeded, 2*time.Minute)
	attempts := c.attempts(t, id)
	if job.Attempt != 2 || len(attempts) != 2 || job.Preemptions != 1 {
		t.Fatalf("want exactly 2 attempts and one preemption, got %d attempts, %d preemptions (%+v); events:\n%s", job.Attempt, job.Preemptions, attempts, trail(t, c, id))
	}
	if attempts[0].Outcome != queue.OutcomeLost || attempts[1].Outcome != queue.OutcomeSucceeded {
		t.Fatalf("want attempt 1 lost and attempt 2 succeeded, got %q and %q", attempts[0].Outcome, attempts[1].Outcome)
	}
	t.Logf("recovery after SIGKILL with the default AckWait: %s", attempts[1].StartedAt.Sub(killed))
	words, lostAt := stateTrail(t, c, id)
	if want := "pending/0 placed/0 running/1 placed/1 running/2 succeeded/2"; strings.Join(words, " ") != want || lostAt != 3 {
		t.Fatalf("want events %q with attempt 1 handed back as lost, got %q (hand-back at %d)", want, strings.Join(words, " "), lostAt)
	}
	cps := c.checkpoints(t, id)
	assertSequenceGrows(t, cps)
	var last queue.Checkpoint
	for _, cp := range cps {
		if cp.Attempt == 1 {
			last = cp
		}
	}
	k := c.checkpointStep(t, last)
	if logs := c.logs(t, id); !strings.Contains(logs, fmt.Sprintf("start attempt=2 resumed=1 step=%d\n", k)) {
		t.Fatalf("attempt 2 must start from checkpoint %d's step %d; logs:\n%s", last.Seq, k, logs)
	}
}

// A worker killed the moment its claim commits, before a beat of its can
// announce the attempt it claimed, still has the job handed back on
// liveness: the worker service tells the server's liveness monitor of the
// attempt, with its run message's reply subject. Without that, the job
// would wait for its lease and AckWait (30 s by default), and its trail
// would go from running to running with no hand-back.
func TestWorkerKilledTheMomentItsClaimCommitsHasItsJobHandedBack(t *testing.T) {
	t.Parallel()
	c := newServerCluster(t)
	a, _ := c.startDevWorker(t)
	b, _ := c.startDevWorker(t)
	byPID := map[int]*local.Instance{a.PID(): a, b.PID(): b}
	pidOf := regexp.MustCompile(`\(pid (\d+),`)
	killed := make(chan int, 1)
	sub, err := c.n.NC.Subscribe(queue.EventSubject("*"), func(m *nats.Msg) {
		var ev queue.Event
		if json.Unmarshal(m.Data, &ev) != nil || ev.State != queue.StateRunning || ev.Attempt != 1 {
			return
		}
		match := pidOf.FindStringSubmatch(ev.Message)
		if match == nil {
			return
		}
		pid, _ := strconv.Atoi(match[1])
		if w := byPID[pid]; w != nil {
			w.Signal(syscall.SIGKILL) //nolint:errcheck // checked by the trail below
			killed <- pid
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // closing
	id := c.submit(t, "name: short\ncommand: [sleep, \"1\"]\n")
	select {
	case <-killed:
	case <-time.After(2 * time.Minute):
		t.Fatal("no worker started the job")
	}
	c.waitState(t, id, queue.StateSucceeded, 2*time.Minute)
	words, lostAt := stateTrail(t, c, id)
	if want := "pending/0 placed/0 running/1 placed/1 running/2 succeeded/2"; strings.Join(words, " ") != want || lostAt != 3 {
		t.Fatalf("want events %q with attempt 1 handed back as lost, got %q (hand-back at %d)", want, strings.Join(words, " "), lostAt)
	}
}

// gatedJob commits a checkpoint every 0.2 s under attempt 1, writing its pid
// to $PIDDIR/<attempt>; a later attempt waits for $GATE, then succeeds.
const gatedJob = `step=0
[ -f "$GPUQ_CHECKPOINT_DIR/step" ] && step=$(cat "$GPUQ_CHECKPOINT_DIR/step")
echo $$ > "$PIDDIR/$GPUQ_ATTEMPT"
echo "start attempt=$GPUQ_ATTEMPT resumed=$GPUQ_RESUMED step=$step"
if [ "$GPUQ_ATTEMPT" = 1 ]; then
  while true; do
    step=$((step+1)); echo $step > "$GPUQ_CHECKPOINT_DIR/step"
    gpuq checkpoint save >/dev/null || exit 9
    sleep 0.2
  done
fi
while [ ! -f "$GATE" ]; do sleep 0.1; done
echo "finished from step $step"`

// A worker paused (SIGSTOP) past the detection time loses its job to
// another worker; when it resumes it is fenced out: it stops its job,
// records nothing more under the lost attempt and never acknowledges the
// job's message (invariant 2).
func TestPausedWorkerIsFencedOutWhenItResumesAndNeverAcknowledges(t *testing.T) {
	t.Parallel()
	c := newServerCluster(t)
	a, aLog := c.startDevWorker(t)
	dir := jobWritable(t)
	gate := filepath.Join(dir, "gate")
	id := c.submit(t, fmt.Sprintf("name: gated\nenv: {PIDDIR: %s, GATE: %s}\ncommand: [/bin/sh, -c, %s]\n", dir, gate, strconv.Quote(gatedJob)))
	c.waitState(t, id, queue.StateRunning, 60*time.Second)
	c.startDevWorker(t)
	waitCheckpoint(t, c, id, 2)
	pidOf := func(attempt int) int {
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(attempt)))
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			t.Fatalf("attempt %d's pid: %q (%v)", attempt, b, err)
		}
		return pid
	}
	first := pidOf(1)
	if err := a.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Paused past the detection time: the job is handed back and taken
	// over while the paused worker's own job still runs.
	queuetest.Eventually(t, 2*time.Minute, "attempt 2 to start", func() bool {
		j := c.job(t, id)
		return j.State == queue.StateRunning && j.Attempt == 2
	})
	words, lostAt := stateTrail(t, c, id)
	if want := "pending/0 placed/0 running/1 placed/1 running/2"; strings.Join(words, " ") != want || lostAt != 3 {
		t.Fatalf("want events %q with attempt 1 handed back as lost, got %q (hand-back at %d)", want, strings.Join(words, " "), lostAt)
	}
	if err := a.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, time.Minute, "the resumed worker to kill its fenced job", func() bool {
		return syscall.Kill(first, 0) != nil
	})
	queuetest.Eventually(t, 30*time.Second, "the resumed worker to log that it is fenced out", func() bool {
		out, _ := os.ReadFile(aLog)
		return strings.Contains(string(out), "fenced out")
	})
	// Attempt 2 is waiting at the gate: the run message must still be
	// there, since the fenced-out worker did not acknowledge it.
	if j := c.job(t, id); j.State != queue.StateRunning || j.Attempt != 2 {
		t.Fatalf("the fenced-out worker must not touch the job: %+v", j)
	}
	if msgs := queuetest.RunMessages(t, c.n.JS); msgs[queue.RunSubject(testPool.Pool, id.String())] != 1 {
		t.Fatalf("a fenced-out worker must not acknowledge the job's message: %v", msgs)
	}
	fencedAt := c.attempts(t, id)[0].EndedAt
	for _, cp := range c.checkpoints(t, id) {
		if cp.Attempt == 1 && fencedAt != nil && cp.CreatedAt.After(*fencedAt) {
			t.Fatalf("checkpoint %d of attempt 1 was recorded after the attempt was fenced", cp.Seq)
		}
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	job := c.waitState(t, id, queue.StateSucceeded, time.Minute)
	attempts := c.attempts(t, id)
	if job.Attempt != 2 || len(attempts) != 2 || attempts[0].Outcome != queue.OutcomeLost || attempts[1].Outcome != queue.OutcomeSucceeded {
		t.Fatalf("want attempt 1 lost and attempt 2 the one success, got %+v", attempts)
	}
	words, _ = stateTrail(t, c, id)
	if want := "pending/0 placed/0 running/1 placed/1 running/2 succeeded/2"; strings.Join(words, " ") != want {
		t.Fatalf("want events %q, got %q", want, strings.Join(words, " "))
	}
	queuetest.Eventually(t, 10*time.Second, "the run message to be acknowledged once", func() bool {
		return len(queuetest.RunMessages(t, c.n.JS)) == 0
	})
}

// Run orders the server delivered to a worker's pull while the worker was
// paused (SIGSTOP) until past the pull's expiry are run when it resumes, not
// dropped for AckWait (30 s by default) to bring back: the worker reads a
// pull until the server ends it. The worker is started as `gpuq dev` starts
// it and paused for less than the liveness monitor's detection time, so
// that it is never declared lost; each job must succeed in its one attempt
// well inside AckWait.
func TestRunOrdersDeliveredToAPausedWorkersPullAreRunWhenItResumes(t *testing.T) {
	t.Parallel()
	c := newServerCluster(t)
	w, _ := c.startDevWorker(t)
	c.waitState(t, c.submit(t, "name: warm\ncommand: [/bin/true]\n"), queue.StateSucceeded, time.Minute)
	cons, err := c.n.JS.Consumer(context.Background(), queue.StreamRun, queue.PoolConsumer(testPool.Pool))
	if err != nil {
		t.Fatal(err)
	}
	// The worker's idle pulls last 360 ms on the server; a run order
	// reaches one unless the pause began near the end of it. Under load
	// (the race detector, other packages' tests) a submission takes a good
	// part of that to become a run order, so most rounds miss; the rounds
	// go on until three in which one did are played: a worker that stops
	// reading its pull at a deadline of its own drops a delivered run order
	// in about two rounds of three. A paused worker issues no new pull, so
	// an order acknowledged-pending before it resumes was delivered to the
	// pull it had out when it was paused.
	caught := 0
	for round := 1; ; round++ {
		if err := w.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		paused := time.Now()
		ids := []uuid.UUID{c.submit(t, "name: held-1\ncommand: [/bin/true]\n"), c.submit(t, "name: held-2\ncommand: [/bin/true]\n")}
		delivered := false
		for !delivered && time.Since(paused) < 450*time.Millisecond {
			info, err := cons.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			delivered = info.NumAckPending > 0
			time.Sleep(10 * time.Millisecond)
		}
		// Past the pull's expiry, and short of the detection time.
		time.Sleep(time.Until(paused.Add(500 * time.Millisecond)))
		if err := w.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			job := c.waitState(t, id, queue.StateSucceeded, 15*time.Second)
			if attempts := c.attempts(t, id); job.Attempt != 1 || len(attempts) != 1 {
				t.Fatalf("job %s: want one attempt, got %+v", id, attempts)
			}
		}
		if delivered {
			caught++
		}
		if caught == 3 {
			return
		}
		if round == 40 {
			t.Fatalf("in 40 rounds a run order reached the paused worker's pull only %d times", caught)
		}
	}
}
