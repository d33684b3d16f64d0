package workers_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/workers/notice/noticetest"
)

// noticeJob counts steps, committing a checkpoint after each; on SIGTERM it
// writes when the signal arrived (unix nanoseconds) to $SIGTERM_AT, then
// commits its final checkpoint and exits.
func noticeJob(sigtermAt string) string {
	script := `step=0
[ -f "$GPUQ_CHECKPOINT_DIR/step" ] && step=$(cat "$GPUQ_CHECKPOINT_DIR/step")
trap 'date +%s%N > "$SIGTERM_AT"; echo $step > "$GPUQ_CHECKPOINT_DIR/step"; gpuq checkpoint save >/dev/null; exit 143' TERM
while [ $step -lt 1000 ]; do
  step=$((step+1))
  echo $step > "$GPUQ_CHECKPOINT_DIR/step"
  gpuq checkpoint save >/dev/null || exit 9
  sleep 0.2
done`
	return "name: noticed\nenv: {SIGTERM_AT: " + strconv.Quote(sigtermAt) + "}\ncommand: [/bin/sh, -c, " + strconv.Quote(script) + "]\n"
}

// noticeRun is one job run by a worker until its provider's notice.
type noticeRun struct {
	c         *cluster
	worker    *local.Instance
	job       uuid.UUID
	sigtermAt string
}

// startNoticeRun starts a worker with extra flags, runs a noticeJob on it
// and waits for its first checkpoint.
func startNoticeRun(t testing.TB, extra ...string) *noticeRun {
	c := newCluster(t)
	r := &noticeRun{c: c, sigtermAt: filepath.Join(jobWritable(t), "sigterm-at")}
	// AckWait is long, so a hand-back that came from AckWait expiring
	// rather than the notice would show.
	r.worker = c.startWorker(t, 30*time.Second, 10*time.Second, extra...)
	r.job = c.submit(t, noticeJob(r.sigtermAt))
	queuetest.Eventually(t, 30*time.Second, "the job's first checkpoint", func() bool {
		return len(c.checkpoints(t, r.job)) > 0
	})
	return r
}

// sigtermReceived is when the job got SIGTERM.
func (r *noticeRun) sigtermReceived(t testing.TB) time.Time {
	var at time.Time
	queuetest.Eventually(t, 30*time.Second, "the job to get SIGTERM", func() bool {
		b, err := os.ReadFile(r.sigtermAt)
		ns, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		at = time.Unix(0, ns)
		return err == nil && perr == nil
	})
	return at
}

// handedBack waits for attempt 1 to end and returns it.
func (r *noticeRun) handedBack(t testing.TB) queue.Attempt {
	queuetest.Eventually(t, 30*time.Second, "attempt 1 to be handed back", func() bool {
		a := r.c.attempts(t, r.job)
		return len(a) > 0 && a[0].EndedAt != nil
	})
	return r.c.attempts(t, r.job)[0]
}

// check proves the acceptance of a notice watcher: SIGTERM reaches the job
// within a second of the announcement, the notice is on the job's trail
// before the hand-back, the final checkpoint is recorded before the
// provider's deadline, and the attempt ends preempted with the provider's
// reason.
func (r *noticeRun) check(t *testing.T, announced, deadline time.Time, reason string) {
	t.Helper()
	sigterm := r.sigtermReceived(t)
	if d := sigterm.Sub(announced); d > time.Second {
		t.Fatalf("the job got SIGTERM %s after the announcement, want under 1s", d)
	}
	a := r.handedBack(t)
	if a.Outcome != queue.OutcomePreempted {
		t.Fatalf("want attempt 1 preempted, got %q", a.Outcome)
	}
	var final queue.Checkpoint
	for _, cp := range r.c.checkpoints(t, r.job) {
		if cp.Attempt == 1 {
			final = cp
		}
	}
	if final.CreatedAt.Before(sigterm) || !final.CreatedAt.Before(deadline) {
		t.Fatalf("the final checkpoint must be recorded after SIGTERM (%s) and before the deadline %s, was at %s",
			sigterm.Format(time.StampMilli), deadline.Format(time.StampMilli), final.CreatedAt.Format(time.StampMilli))
	}
	rows, err := r.c.store.DB.Query(`SELECT message FROM job_events WHERE job_id = $1 AND attempt = 1 ORDER BY id`, r.job)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var trail []string
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			t.Fatal(err)
		}
		trail = append(trail, m)
	}
	noticeAt, requeueAt := -1, -1
	for i, m := range trail {
		if strings.HasPrefix(m, "preemption notice: ") && strings.Contains(m, reason) {
			noticeAt = i
		}
		if strings.HasPrefix(m, "preempted: ") && strings.Contains(m, reason) {
			requeueAt = i
		}
	}
	if noticeAt < 0 || requeueAt < noticeAt {
		t.Fatalf("the job's trail must record the notice, then the preemption, both with %q; got %q", reason, trail)
	}
	t.Logf("SIGTERM %s after the announcement; handed back %s after it; %s before the deadline",
		sigterm.Sub(announced).Round(time.Millisecond), a.EndedAt.Sub(announced).Round(time.Millisecond), deadline.Sub(*a.EndedAt).Round(time.Millisecond))
	if err := r.worker.Wait(); err != nil {
		t.Fatalf("the noticed worker must exit cleanly once it has handed back: %v", err)
	}
}

// The worker's --notice-endpoint flag points the watcher at a fake: the
// documented metadata addresses are link-local and answer only on the
// provider's machines.

func TestAWSSpotInterruptionNoticeHandsTheJobBackBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	imds := noticetest.NewAWS(t)
	r := startNoticeRun(t, "--notice", "aws", "--notice-endpoint", imds.URL)
	imds.Rebalance(time.Now())
	queuetest.Eventually(t, 10*time.Second, "the early warning on the job's trail", func() bool {
		var n int
		r.c.store.DB.QueryRow(`SELECT count(*) FROM job_events WHERE job_id = $1 AND message LIKE 'early warning: AWS rebalance recommendation%'`, r.job).Scan(&n) //nolint:errcheck // zero on error
		return n == 1
	})
	if a := r.c.attempts(t, r.job); a[0].EndedAt != nil {
		t.Fatal("a rebalance recommendation is an early warning; it must not hand the job back")
	}
	announced := time.Now()
	deadline := announced.Add(2 * time.Minute).Truncate(time.Second)
	imds.Interrupt("terminate", deadline)
	r.check(t, announced, deadline, "AWS spot interruption: terminate")
}

func TestGCPPreemptionNoticeHandsTheJobBackBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	md := noticetest.NewGCP(t)
	r := startNoticeRun(t, "--notice", "gcp", "--notice-endpoint", md.URL)
	announced := time.Now()
	md.Set("preempted", "TRUE")
	r.check(t, announced, announced.Add(30*time.Second), "GCP preemption")
}

func TestAzurePreemptEventHandsTheJobBackAndIsAcknowledgedAfterwards(t *testing.T) {
	t.Parallel()
	imds := noticetest.NewAzure(t, "gpuq-worker-1")
	r := startNoticeRun(t, "--notice", "azure", "--notice-endpoint", imds.URL)
	announced := time.Now()
	deadline := imds.Preempt("evict-1")
	r.check(t, announced, deadline, "Azure scheduled event Preempt")
	if s := imds.Started(); len(s) != 1 || s[0] != "evict-1" {
		t.Fatalf("the worker must acknowledge the Preempt event once it has handed back, started %v", s)
	}
}

func TestRunPodSIGTERMHandsTheJobBackWithinItsFiveSeconds(t *testing.T) {
	t.Parallel()
	// No --notice: the provider's default is SIGTERM with RunPod's 5 s.
	r := startNoticeRun(t, "--provider", "runpod")
	announced := time.Now()
	if err := r.worker.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The container runtime SIGKILLs whatever is left after 5 s.
	kill := time.AfterFunc(5*time.Second, func() { r.worker.Signal(syscall.SIGKILL) }) //nolint:errcheck // it may have exited
	defer kill.Stop()
	r.check(t, announced, announced.Add(5*time.Second), "SIGTERM received; SIGKILL follows after 5s")
}

func TestNoticeDeadlineCutsTheGraceOfAJobThatIgnoresSIGTERM(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	// --grace 20s, but RunPod SIGKILLs 5 s after SIGTERM: the worker must
	// stop waiting for the job in time to hand it back before that.
	w := c.startWorker(t, 30*time.Second, 20*time.Second, "--provider", "runpod")
	id := c.submit(t, "name: stubborn\ncommand: [/bin/sh, -c, 'echo 1 > \"$GPUQ_CHECKPOINT_DIR/step\"; gpuq checkpoint save; trap \"sleep 60\" TERM; while true; do sleep 0.2; done']\n")
	queuetest.Eventually(t, 30*time.Second, "the job's first checkpoint", func() bool { return len(c.checkpoints(t, id)) > 0 })
	announced := time.Now()
	if err := w.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, 30*time.Second, "attempt 1 to be handed back", func() bool {
		a := c.attempts(t, id)
		return len(a) > 0 && a[0].EndedAt != nil
	})
	a := c.attempts(t, id)[0]
	took := a.EndedAt.Sub(announced)
	t.Logf("handed back %s after SIGTERM (--grace 20s)", took.Round(time.Millisecond))
	if a.Outcome != queue.OutcomePreempted || took >= 5*time.Second {
		t.Fatalf("want the job handed back as preempted within RunPod's 5 s, got %q after %s", a.Outcome, took)
	}
	if err := w.Wait(); err != nil || time.Since(announced) >= 5*time.Second {
		t.Fatalf("the worker must exit cleanly before RunPod's SIGKILL, exited %s after SIGTERM: %v", time.Since(announced), err)
	}
}

// BenchmarkNoticeToHandBack measures, for each watcher, the time from a
// provider announcing a preemption to the worker having recorded the job's
// final checkpoint and handed it back (the attempt ended as preempted),
// with a real worker process and a job that saves a checkpoint on SIGTERM.
func BenchmarkNoticeToHandBack(b *testing.B) {
	for _, kind := range []string{"aws", "gcp", "azure", "sigterm"} {
		b.Run(kind, func(b *testing.B) {
			var total, toSigterm time.Duration
			for range b.N {
				b.StopTimer()
				var announce func()
				var extra []string
				switch kind {
				case "aws":
					imds := noticetest.NewAWS(b)
					extra = []string{"--notice", "aws", "--notice-endpoint", imds.URL}
					announce = func() { imds.Interrupt("terminate", time.Now().Add(2*time.Minute)) }
				case "gcp":
					md := noticetest.NewGCP(b)
					extra = []string{"--notice", "gcp", "--notice-endpoint", md.URL}
					announce = func() { md.Set("preempted", "TRUE") }
				case "azure":
					imds := noticetest.NewAzure(b, "gpuq-worker-1")
					extra = []string{"--notice", "azure", "--notice-endpoint", imds.URL}
					announce = func() { imds.Preempt(fmt.Sprint("evict-", time.Now().UnixNano())) }
				}
				r := startNoticeRun(b, extra...)
				if announce == nil {
					announce = func() { r.worker.Signal(syscall.SIGTERM) } //nolint:errcheck // checked by handedBack
				}
				b.StartTimer()
				announced := time.Now()
				announce()
				a := r.handedBack(b)
				b.StopTimer()
				total += a.EndedAt.Sub(announced)
				toSigterm += r.sigtermReceived(b).Sub(announced)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/hand-back")
			b.ReportMetric(float64(toSigterm.Milliseconds())/float64(b.N), "ms/to-SIGTERM")
		})
	}
}
