package workers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/cmd/gpuq/cli"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/sql/pgtest"
	"github.com/gpuq/gpuq/workers"
)

// gpuqBin is the gpuq binary the worker processes run, built once.
var gpuqBin string

func TestMain(m *testing.M) {
	queuetest.ServeNATSProcess()
	dir, err := os.MkdirTemp("", "gpuq-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// A worker run as root runs its jobs as other users, who must reach the
	// binary for `gpuq checkpoint save`.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gpuqBin = filepath.Join(dir, "gpuq")
	args := []string{"build", "-o", gpuqBin}
	if raceEnabled {
		// A race in a worker process stops it at once, so the test that
		// drove it fails instead of the report going unread.
		args = append(args, "-race")
		os.Setenv("GORACE", "halt_on_error=1 exitcode=66")
	}
	if out, err := exec.Command("go", append(args, "github.com/gpuq/gpuq/cmd/gpuq")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building gpuq: %v\n%s", err, out)
		os.Exit(1)
	}
	code := pgtest.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

var testPool = local.PoolConfig{Pool: "eu-cpu", Region: "eu-test-1", Country: "DE", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: "on-demand", PricePerHour: "0.10"}

// cluster is a control plane on real JetStream and PostgreSQL, with worker
// processes started from the real binary.
type cluster struct {
	n      *queuetest.NATS
	store  *store.Store
	dbURL  string
	placer *control.PolicyPlacer
	// proc, when set, is the NATS server the workers reach, in a process
	// of its own; n then holds only the test's connection to it.
	proc *queuetest.NATSProcess
}

// natsURL is the URL the workers reach NATS at.
func (c *cluster) natsURL() string {
	if c.proc != nil {
		return c.proc.URL
	}
	return c.n.Server.URL()
}

// issuer issues the workers' credentials.
func (c *cluster) issuer() *queue.CredentialIssuer {
	if c.proc != nil {
		return c.proc.Issuer
	}
	return c.n.Server.Issuer
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	return newClusterOf(t, testPool)
}

// newClusterOf is a cluster whose placer and pool registry know pools.
func newClusterOf(t testing.TB, pools ...local.PoolConfig) *cluster {
	t.Helper()
	return newClusterRules(t, policy.Rules{}, pools...)
}

// newClusterRules is a cluster whose placer places by rules.
func newClusterRules(t testing.TB, rules policy.Rules, pools ...local.PoolConfig) *cluster {
	t.Helper()
	n := queuetest.StartNATS(t)
	store, url := queuetest.Store(t, n)
	// These tests read back every checkpoint each attempt recorded, so
	// none is pruned here (TestThousandJobs… covers pruning).
	store.Storage.KeepCheckpoints = 1000
	provider, err := local.New(pools)
	if err != nil {
		t.Fatal(err)
	}
	placer := &control.PolicyPlacer{Sources: []adapters.OfferSource{provider}, Rules: rules, Spend: store.Charged}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&control.Scheduler{JS: n.JS, Store: store, Placer: placer}).Run(ctx) //nolint:errcheck // ends with ctx
	}()
	t.Cleanup(func() { cancel(); <-done })
	svc := &control.WorkerService{NATS: n.NC, Store: store, Pools: &control.OfferRegistry{Sources: []adapters.OfferSource{provider}}, Placer: placer, JS: n.JS,
		Archives: &workers.ObjectStore{JS: n.JS}}
	if _, err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The job commands reach jobs through the client service, as they do
	// through every gpuq server.
	if _, err := (&control.ClientService{NATS: n.NC, Store: store, JS: n.JS, Archives: &workers.ObjectStore{JS: n.JS}}).Start(ctx); err != nil {
		t.Fatal(err)
	}
	return &cluster{n: n, store: store, dbURL: url, placer: placer}
}

// startWorker launches `gpuq worker` for the test pool; its output is shown
// if the test fails.
func (c *cluster) startWorker(t testing.TB, ackWait, grace time.Duration, extra ...string) *local.Instance {
	t.Helper()
	return c.startPoolWorker(t, testPool, ackWait, grace, extra...)
}

// startPoolWorker launches `gpuq worker` for pool.
func (c *cluster) startPoolWorker(t testing.TB, pool local.PoolConfig, ackWait, grace time.Duration, extra ...string) *local.Instance {
	t.Helper()
	args := append([]string{"--nats-url", c.natsURL(),
		"--ack-wait", ackWait.String(), "--grace", grace.String(), "--data-dir", jobsDir(t)}, extra...)
	inst, _ := c.launch(t, &local.Launcher{Executable: gpuqBin, Args: args}, pool)
	return inst
}

// launch starts a worker for pool with l, as gpuq dev starts one: with a
// worker credential scoped to the pool in its environment. Its output goes
// to the returned log file and is shown if the test fails; it is killed
// (resumed first, should the test have paused it) when the test ends.
func (c *cluster) launch(t testing.TB, l *local.Launcher, pool local.PoolConfig) (*local.Instance, string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "worker.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	l.Output = logFile
	l.PoolEnv = func(p local.PoolConfig) ([]string, error) {
		cred, err := c.issuer().IssueWorker(p.Pool, p.Region, "")
		return []string{adapters.EnvNATSCredential + "=" + cred.String()}, err
	}
	inst, err := l.Launch(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		inst.Signal(syscall.SIGCONT) //nolint:errcheck // it may have exited
		inst.Signal(syscall.SIGKILL) //nolint:errcheck // it may have exited
		inst.Wait()                  //nolint:errcheck // killed
		logFile.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("worker %s output:\n%s", inst.ID(), out)
		}
	})
	return inst, logPath
}

// jobsDir is a test directory a worker may keep its attempts in (and
// outlive: the test removes it): as root the worker runs jobs as other users, who
// must enter it, and t.TempDir's are closed to others.
func jobsDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// jobWritable is a test directory jobs write to (files a test reads back),
// as other users when the worker runs as root.
func jobWritable(t testing.TB) string {
	t.Helper()
	dir := jobsDir(t)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

func (c *cluster) submit(t testing.TB, spec string) uuid.UUID {
	t.Helper()
	s, err := queue.ParseSpec([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := queue.Submit(context.Background(), c.n.JS, s)
	if err != nil {
		t.Fatal(err)
	}
	return sub.JobID
}

func (c *cluster) job(t *testing.T, id uuid.UUID) *queue.Job {
	t.Helper()
	j, err := c.store.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// waitState follows the job's events until it reaches want.
func (c *cluster) waitState(t *testing.T, id uuid.UUID, want queue.JobState, timeout time.Duration) *queue.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if j, err := c.store.Job(ctx, id); err == nil && j.State == want {
		return j
	}
	err := queue.FollowEvents(ctx, c.n.JS, id, func(ev queue.Event) bool { return ev.State != want })
	j := c.job(t, id)
	if j.State != want {
		t.Fatalf("job %s: want state %s, got %s (%s) after %v", id, want, j.State, j.Reason, err)
	}
	return j
}

func (c *cluster) attempts(t testing.TB, id uuid.UUID) []queue.Attempt {
	t.Helper()
	a, err := c.store.Attempts(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (c *cluster) checkpoints(t testing.TB, id uuid.UUID) []queue.Checkpoint {
	t.Helper()
	cps, err := c.store.Checkpoints(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return cps
}

func (c *cluster) logs(t *testing.T, id uuid.UUID) string {
	t.Helper()
	var buf bytes.Buffer
	if err := queue.ReadLogs(context.Background(), c.n.JS, id, &buf, false, nil); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// checkpointStep reads the step file out of a recorded checkpoint.
func (c *cluster) checkpointStep(t *testing.T, cp queue.Checkpoint) int {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "cp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := workers.Download(context.Background(), &workers.ObjectStore{JS: c.n.JS}, cp.StoreURI, cp.SHA256, f); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := workers.Unpack(f, dir, queue.ArchiveLimits{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "step"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// counterJob counts to steps, committing a checkpoint after each step; on
// SIGTERM it commits its final checkpoint and exits.
func counterJob(steps int, sleep string) string {
	script := `step=0
[ -f "$GPUQ_CHECKPOINT_DIR/step" ] && step=$(cat "$GPUQ_CHECKPOINT_DIR/step")
echo "start attempt=$GPUQ_ATTEMPT resumed=$GPUQ_RESUMED step=$step"
trap 'echo "notice at step $step"; echo $step > "$GPUQ_CHECKPOINT_DIR/step"; gpuq checkpoint save >/dev/null; exit 143' TERM
while [ $step -lt ` + strconv.Itoa(steps) + ` ]; do
  step=$((step+1))
  echo $step > "$GPUQ_CHECKPOINT_DIR/step"
  gpuq checkpoint save >/dev/null || exit 9
  echo "step $step"
  sleep ` + sleep + `
done
echo "finished at step $step" > "$GPUQ_OUTPUT_DIR/result.txt"`
	return "name: counter\ncommand: [/bin/sh, -c, " + strconv.Quote(script) + "]\n"
}

// killHolderAfterCheckpoints starts a worker, submits a counter job that
// checkpoints every 0.2 s, starts a second worker once the job runs (within
// running), and
// SIGKILLs the first worker, which holds attempt 1, after the job's third
// checkpoint. It returns the killed worker, the job and when it was killed.
func (c *cluster) killHolderAfterCheckpoints(t *testing.T, running time.Duration, start func() *local.Instance) (*local.Instance, uuid.UUID, time.Time) {
	t.Helper()
	a := start()
	id := c.submit(t, counterJob(20, "0.2"))
	c.waitState(t, id, queue.StateRunning, running)
	start()
	waitCheckpoint(t, c, id, 3)
	if got := c.attempts(t, id)[0].PID; got != a.PID() {
		t.Fatalf("attempt 1 should run on the first worker (pid %d), got pid %d", a.PID(), got)
	}
	killed := time.Now()
	if err := a.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	return a, id, killed
}

func waitCheckpoint(t *testing.T, c *cluster, id uuid.UUID, seq int) {
	t.Helper()
	queuetest.Eventually(t, 30*time.Second, fmt.Sprintf("checkpoint %d of job %s", seq, id), func() bool {
		cps := c.checkpoints(t, id)
		return len(cps) > 0 && cps[len(cps)-1].Seq >= seq
	})
}

func assertSequenceGrows(t *testing.T, cps []queue.Checkpoint) {
	t.Helper()
	for i := 1; i < len(cps); i++ {
		if cps[i].Seq <= cps[i-1].Seq {
			t.Fatalf("checkpoint sequence went backwards: %d after %d", cps[i].Seq, cps[i-1].Seq)
		}
	}
}

func TestJobSucceedsWithLogsAndOutputs(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startWorker(t, 5*time.Second, 2*time.Second)
	id := c.submit(t, `name: hello
command: [/bin/sh, -c, 'echo "hello from $GPUQ_JOB_ID"; echo oops >&2; echo 42 > "$GPUQ_OUTPUT_DIR/answer.txt"']
`)
	job := c.waitState(t, id, queue.StateSucceeded, 30*time.Second)
	if job.Attempt != 1 || job.ExitCode == nil || *job.ExitCode != 0 {
		t.Fatalf("want one attempt exiting 0, got %+v", job)
	}
	if a := c.attempts(t, id)[0]; a.NodeID == "" || a.CanaryRunID == 0 {
		t.Fatalf("the attempt must record its node and the canary it ran after: %+v", a)
	}
	if logs := c.logs(t, id); !strings.Contains(logs, "hello from "+id.String()) || !strings.Contains(logs, "oops") {
		t.Fatalf("stdout and stderr must be kept as logs, got %q", logs)
	}
	jsonLogs := runCLI(t, 0, "logs", id.String(), "-o", "json", "--nats-url", c.n.URL)
	if !strings.Contains(jsonLogs, `{"attempt":1,"line":"oops","stream":"stderr"}`) {
		t.Fatalf("gpuq logs -o json must tag each line with its attempt and stream:\n%s", jsonLogs)
	}
	rec, err := c.store.Result(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.CreateTemp(t.TempDir(), "out")
	defer f.Close()
	if err := workers.Download(context.Background(), &workers.ObjectStore{JS: c.n.JS}, rec.StoreURI, rec.SHA256, f); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := workers.Unpack(f, dir, queue.ArchiveLimits{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "answer.txt")); string(b) != "42\n" {
		t.Fatalf("outputs: want answer.txt = 42, got %q", b)
	}
	if rec.Region != testPool.Region {
		t.Fatalf("outputs must be stored in the worker's region %s, got %s", testPool.Region, rec.Region)
	}
	queuetest.Eventually(t, 5*time.Second, "the run message to be acknowledged", func() bool {
		return len(queuetest.RunMessages(t, c.n.JS)) == 0
	})
}

func TestCheckpointSaysInTheJobsLogWhatItLeftOut(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startWorker(t, 5*time.Second, 2*time.Second)
	host := t.TempDir()
	if err := os.Chmod(host, 0o755); err != nil {
		t.Fatal(err)
	}
	id := c.submit(t, `name: dataset-link
command: [/bin/sh, -c, 'echo 1 > "$GPUQ_CHECKPOINT_DIR/step"; ln -s `+host+` "$GPUQ_CHECKPOINT_DIR/data"; gpuq checkpoint save']
`)
	c.waitState(t, id, queue.StateSucceeded, 30*time.Second)
	if cps := c.checkpoints(t, id); len(cps) != 1 {
		t.Fatalf("the checkpoint must still be saved, got %+v", cps)
	}
	logs := c.logs(t, id)
	if !strings.Contains(logs, "does not hold data (1 in all): links to outside checkpoint/") {
		t.Fatalf("the job's log must say that the link to %s was left out of its checkpoint, got %q", host, logs)
	}
}

func TestBuiltInNoopSucceedsThroughTheClaimAndIsAcknowledged(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startWorker(t, 5*time.Second, time.Second)
	ids := []uuid.UUID{c.submit(t, "command: [\"gpuq:noop\"]\n"), c.submit(t, "command: [\"gpuq:noop\"]\n")}
	for _, id := range ids {
		job := c.waitState(t, id, queue.StateSucceeded, 30*time.Second)
		attempts := c.attempts(t, id)
		if job.Attempt != 1 || len(attempts) != 1 || attempts[0].Outcome != queue.OutcomeSucceeded || attempts[0].EndedAt == nil {
			t.Fatalf("want one attempt recorded as succeeded, got job %+v attempts %+v", job, attempts)
		}
	}
	queuetest.Eventually(t, 5*time.Second, "the run messages to be acknowledged", func() bool {
		return len(queuetest.RunMessages(t, c.n.JS)) == 0
	})
}

// Bad run orders at the head of a pool's queue hold none of the good ones
// back, with the one slot a worker has by default (invariant 7): each is
// settled, never redelivered without end.
func TestBadRunOrdersAheadOfGoodOnesHoldNoneOfThemBack(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	for _, body := range []string{
		`not json at all: [`,
		`{"job_id": "` + uuid.NewString() + `", "placement_version": 1, "pool": "` + testPool.Pool + `", "region": "` + testPool.Region + `"}`,
		`{"job_id": 7}`,
	} {
		if _, err := c.n.JS.Publish(ctx, queue.RunSubject(testPool.Pool, uuid.NewString()), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	ids := []uuid.UUID{c.submit(t, "command: [/bin/true]\n"), c.submit(t, "command: [\"gpuq:noop\"]\n")}
	c.startWorker(t, 5*time.Second, time.Second)
	for _, id := range ids {
		c.waitState(t, id, queue.StateSucceeded, 30*time.Second)
	}
	queuetest.Eventually(t, 10*time.Second, "every run message to be settled", func() bool {
		return queuetest.StreamMessages(t, c.n.JS, queue.StreamRun) == 0
	})
}

func TestKilledWorkerIsReplacedAndTheJobResumesFromItsLatestCheckpoint(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const ackWait = 2 * time.Second
	a, id, killed := c.killHolderAfterCheckpoints(t, 30*time.Second, func() *local.Instance { return c.startWorker(t, ackWait, 2*time.Second) })
	job := c.waitState(t, id, queue.StateSucceeded, 60*time.Second)
	attempts := c.attempts(t, id)
	if job.Attempt != 2 || len(attempts) != 2 {
		t.Fatalf("want exactly 2 attempts, got %d (%+v)", job.Attempt, attempts)
	}
	if attempts[0].Outcome != queue.OutcomeLost || attempts[1].Outcome != queue.OutcomeSucceeded {
		t.Fatalf("want attempt 1 lost and attempt 2 succeeded, got %q and %q", attempts[0].Outcome, attempts[1].Outcome)
	}
	// The loss is on the job's trail, under attempt 1, before attempt 2
	// starts running.
	rows, err := c.store.DB.Query(`SELECT attempt, message FROM job_events WHERE job_id = $1 ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	var trail []string
	for rows.Next() {
		var at int
		var m string
		if err := rows.Scan(&at, &m); err != nil {
			t.Fatal(err)
		}
		trail = append(trail, fmt.Sprintf("%d %s", at, m))
	}
	rows.Close()
	lostAt, runningAt := -1, -1
	for i, e := range trail {
		if strings.HasPrefix(e, "1 lost: worker ") && strings.Contains(e, fmt.Sprintf("(pid %d)", a.PID())) {
			lostAt = i
		}
		if strings.HasPrefix(e, "2 running on ") {
			runningAt = i
		}
	}
	if lostAt < 0 || runningAt < lostAt {
		t.Fatalf("want a lost event naming attempt 1's worker before attempt 2 runs, got %q", trail)
	}
	recovery := attempts[1].StartedAt.Sub(killed)
	t.Logf("recovery after SIGKILL: %s (AckWait %s)", recovery, ackWait)
	if recovery > ackWait+10*time.Second {
		t.Fatalf("the job must be redelivered after AckWait, took %s", recovery)
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
	logs := c.logs(t, id)
	if !strings.Contains(logs, fmt.Sprintf("start attempt=2 resumed=1 step=%d\n", k)) {
		t.Fatalf("attempt 2 must start from checkpoint %d's step %d with GPUQ_RESUMED=1; logs:\n%s", last.Seq, k, logs)
	}
	var succeeded int
	if err := c.store.DB.QueryRow(`SELECT count(*) FROM attempts WHERE job_id = $1 AND outcome = 'succeeded'`, id).Scan(&succeeded); err != nil || succeeded != 1 {
		t.Fatalf("want exactly one success recorded, got %d (%v)", succeeded, err)
	}
}

func TestPreemptionNoticeHandsTheJobBackWithoutWaitingForAckWait(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const ackWait = 30 * time.Second
	a := c.startWorker(t, ackWait, 5*time.Second)
	id := c.submit(t, counterJob(25, "0.2"))
	c.waitState(t, id, queue.StateRunning, 30*time.Second)
	c.startWorker(t, ackWait, 5*time.Second)
	waitCheckpoint(t, c, id, 2)
	noticed := time.Now()
	if err := a.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, 15*time.Second, "attempt 2 to start", func() bool { return len(c.attempts(t, id)) == 2 })
	attempts := c.attempts(t, id)
	handover := attempts[1].StartedAt.Sub(noticed)
	t.Logf("resumed %s after the notice (AckWait %s)", handover, ackWait)
	if handover > 10*time.Second {
		t.Fatalf("the job must be handed back at once, not after AckWait; took %s", handover)
	}
	if err := a.Wait(); err != nil {
		t.Fatalf("the noticed worker must exit cleanly: %v", err)
	}
	job := c.waitState(t, id, queue.StateSucceeded, 60*time.Second)
	attempts = c.attempts(t, id)
	if attempts[0].Outcome != queue.OutcomePreempted || job.Preemptions != 1 || job.Attempt != 2 {
		t.Fatalf("want attempt 1 preempted and one preemption, got %q, %d preemptions, %d attempts", attempts[0].Outcome, job.Preemptions, job.Attempt)
	}
	cps := c.checkpoints(t, id)
	assertSequenceGrows(t, cps)
	var final queue.Checkpoint
	for _, cp := range cps {
		if cp.Attempt == 1 {
			final = cp
		}
	}
	if final.CreatedAt.Before(noticed) {
		t.Fatalf("attempt 1's final checkpoint must be committed after the notice (at %s), latest was %s", noticed, final.CreatedAt)
	}
	k := c.checkpointStep(t, final)
	logs := c.logs(t, id)
	if !strings.Contains(logs, "notice at step") || !strings.Contains(logs, fmt.Sprintf("start attempt=2 resumed=1 step=%d\n", k)) {
		t.Fatalf("attempt 2 must resume from the final checkpoint (step %d); logs:\n%s", k, logs)
	}
}

func TestStaleWorkerKillsItsJobAndDoesNotAck(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startWorker(t, 3*time.Second, time.Second)
	pidFile := filepath.Join(jobWritable(t), "pid")
	id := c.submit(t, "name: sleeper\nenv: {PIDFILE: "+pidFile+"}\ncommand: [/bin/sh, -c, 'echo $$ > $PIDFILE; exec sleep 300']\n")
	c.waitState(t, id, queue.StateRunning, 30*time.Second)
	var pid int
	queuetest.Eventually(t, 10*time.Second, "the job to write its pid", func() bool {
		b, err := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	// Another worker takes the job over: the attempt number moves on.
	if _, err := c.store.DB.Exec(`UPDATE jobs SET attempt = attempt + 1, lease_expires_at = now() + interval '1 hour' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, 10*time.Second, "the stale worker to kill its job", func() bool {
		return syscall.Kill(pid, 0) != nil
	})
	queuetest.Eventually(t, 10*time.Second, "the stale attempt to be closed as fenced", func() bool {
		a := c.attempts(t, id)
		return len(a) == 1 && a[0].Outcome == queue.OutcomeFenced
	})
	if msgs := queuetest.RunMessages(t, c.n.JS); msgs[queue.RunSubject(testPool.Pool, id.String())] != 1 {
		t.Fatalf("a fenced-out worker must not acknowledge the job's message: %v", msgs)
	}
	if j := c.job(t, id); j.State != queue.StateRunning || j.Attempt != 2 {
		t.Fatalf("the stale worker must not touch the job: %+v", j)
	}
}

func TestFailingJobIsRetriedThenFailedAndStatusShowsWhy(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startWorker(t, 5*time.Second, time.Second)
	id := c.submit(t, `name: boom
retries: {max_errors: 2, delay: 200ms}
command: [/bin/sh, -c, 'echo "boom on attempt $GPUQ_ATTEMPT"; exit 3']
`)
	job := c.waitState(t, id, queue.StateFailed, 30*time.Second)
	if job.Attempt != 3 || job.Errors != 3 || job.ExitCode == nil || *job.ExitCode != 3 {
		t.Fatalf("want 3 attempts (1 + max_errors 2) ending with exit code 3, got attempt %d errors %d exit %v", job.Attempt, job.Errors, job.ExitCode)
	}
	out := runCLI(t, 0, "status", id.String(), "--nats-url", c.n.URL)
	for _, want := range []string{"state      failed", "exit code  3", "boom on attempt 3", "exited with status 3; retry 1 of 2 in 200ms", "exited with status 3; retry 2 of 2 in 200ms",
		"failed   3        exited with status 3\n", "local eu-test-1 (DE), on-demand, 0.10 EUR/h", "placed on pool eu-cpu", "running on"} {
		if !strings.Contains(out, want) {
			t.Fatalf("gpuq status must show %q; got:\n%s", want, out)
		}
	}
	if len(queuetest.RunMessages(t, c.n.JS)) != 0 {
		t.Fatal("a failed job's message must be acknowledged")
	}
}

func TestCancelStopsARunningJob(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startWorker(t, 5*time.Second, time.Second)
	id := c.submit(t, "name: long\ncommand: [sleep, '300']\n")
	c.waitState(t, id, queue.StateRunning, 30*time.Second)
	runCLI(t, 0, "cancel", id.String(), "--nats-url", c.n.URL)
	queuetest.Eventually(t, 10*time.Second, "the attempt to end as cancelled", func() bool {
		a := c.attempts(t, id)
		return len(a) == 1 && a[0].Outcome == queue.OutcomeCancelled
	})
	if j := c.job(t, id); j.State != queue.StateCancelled {
		t.Fatalf("want cancelled, got %s", j.State)
	}
	queuetest.Eventually(t, 5*time.Second, "the message to be acknowledged", func() bool {
		return len(queuetest.RunMessages(t, c.n.JS)) == 0
	})
}

func TestWorkerRefusesAJobOutsideItsResidency(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	// A worker of the EU pool misconfigured as running in the US refuses
	// the EU job it is handed (defence in depth), leaves it to the pool's
	// other workers, and never ends it.
	id := c.submit(t, "command: [/bin/true]\nplacement: {residency: EU}\n")
	c.waitState(t, id, queue.StatePlaced, 30*time.Second)
	c.startWorker(t, 5*time.Second, time.Second, "--country", "US")
	// Handed twice: refused once and offered again after its delay. The
	// worker creates its pool's consumer when it starts.
	queuetest.Eventually(t, 30*time.Second, "the worker to be handed the job twice", func() bool {
		cons, err := c.n.JS.Consumer(ctx, queue.StreamRun, queue.PoolConsumer(testPool.Pool))
		if err != nil {
			return false
		}
		info, err := cons.Info(ctx)
		return err == nil && info.Delivered.Consumer >= 2
	})
	if j := c.job(t, id); j.State != queue.StatePlaced || len(c.attempts(t, id)) != 0 {
		t.Fatalf("the worker must refuse the job without running or ending it: %+v, attempts %v", j, c.attempts(t, id))
	}
	// A worker where the pool really is runs it.
	c.startWorker(t, 5*time.Second, time.Second)
	c.waitState(t, id, queue.StateSucceeded, 60*time.Second)
}

// placeEUJob submits a job bound to EU residency and waits until it is
// placed, on testPool: the cheapest pool inside the EU in the tests that
// call it.
func (c *cluster) placeEUJob(t *testing.T) (uuid.UUID, *queue.Job) {
	t.Helper()
	id := c.submit(t, "command: [/bin/true]\nplacement: {residency: EU}\n")
	placed := c.waitState(t, id, queue.StatePlaced, 30*time.Second)
	if placed.Pool != testPool.Pool {
		t.Fatalf("an EU job placed on %s, not on %s", placed.Pool, testPool.Pool)
	}
	return id, placed
}

var usPool = local.PoolConfig{Pool: "us-cpu", Region: "us-test-1", Country: "US", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: "on-demand", PricePerHour: "0.05"}

// A job's retries after errors run where its first attempt could, inside
// its residency, while a cheaper pool outside it has a worker taking work
// (invariant 4, on retry).
func TestErrorRetriesStayInsideTheResidency(t *testing.T) {
	t.Parallel()
	c := newClusterOf(t, testPool, usPool)
	c.startWorker(t, 5*time.Second, time.Second)
	c.startPoolWorker(t, usPool, 5*time.Second, time.Second)
	eu := c.submit(t, `placement: {residency: EU}
retries: {max_errors: 3, delay: 100ms}
command: [/bin/sh, -c, '[ $GPUQ_ATTEMPT -ge 3 ]']
`)
	anywhere := c.submit(t, "command: [/bin/true]\n")
	c.waitState(t, eu, queue.StateSucceeded, 60*time.Second)
	attempts := c.attempts(t, eu)
	if len(attempts) != 3 {
		t.Fatalf("want two failed attempts and a third that succeeds, got %+v", attempts)
	}
	for _, a := range attempts {
		if a.Pool != testPool.Pool {
			t.Errorf("attempt %d (%s) ran on pool %s, outside residency EU", a.Attempt, a.Outcome, a.Pool)
		}
	}
	c.waitState(t, anywhere, queue.StateSucceeded, 60*time.Second)
	if a := c.attempts(t, anywhere); len(a) != 1 || a[0].Pool != usPool.Pool {
		t.Fatalf("a job without residency must run on the cheaper US pool, whose worker takes work: %+v", a)
	}
}

func TestForgedRunOrderOnAPoolOutsideResidencyIsRefusedAtClaimAndRePlaced(t *testing.T) {
	t.Parallel()
	c := newClusterOf(t, testPool, usPool)
	ctx := context.Background()
	id, placed := c.placeEUJob(t)
	// The US pool's worker believes it may run EU jobs (its flags say DE)
	// and is handed a forged run order without the residency's countries:
	// only the control plane's pool registry stands in the way.
	c.startPoolWorker(t, usPool, 5*time.Second, time.Second, "--country", "DE")
	order, _ := json.Marshal(queue.RunOrder{JobID: id, PlacementVersion: placed.PlacementVersion, Pool: usPool.Pool})
	if _, err := c.n.JS.Publish(ctx, queue.RunSubject(usPool.Pool, id.String()), order); err != nil {
		t.Fatal(err)
	}
	var refusals, version int
	queuetest.Eventually(t, 30*time.Second, "the claim to be refused and the job re-placed", func() bool {
		c.store.DB.QueryRow(`SELECT claim_refusals, placement_version FROM jobs WHERE id = $1`, id).Scan(&refusals, &version) //nolint:errcheck // retried
		return refusals == 1 && version == placed.PlacementVersion+1
	})
	if j := c.job(t, id); j.State != queue.StatePlaced || len(c.attempts(t, id)) != 0 {
		t.Fatalf("the refused job must wait, not run or end: %+v", j)
	}
	var reason string
	if err := c.store.DB.QueryRow(`SELECT message FROM job_events WHERE job_id = $1 AND message LIKE 'claim refused%'`, id).Scan(&reason); err != nil ||
		!strings.Contains(reason, "pool us-cpu (country US) lies outside residency EU") {
		t.Fatalf("the refusal's reason: %q, %v", reason, err)
	}
	p, err := c.store.LatestPlacement(ctx, id)
	if err != nil || p.Pool != testPool.Pool {
		t.Fatalf("re-placed on %+v, %v; want the EU pool", p, err)
	}
	c.startWorker(t, 5*time.Second, time.Second)
	c.waitState(t, id, queue.StateSucceeded, 60*time.Second)
	for _, a := range c.attempts(t, id) {
		if a.Pool != testPool.Pool {
			t.Fatalf("attempt %d ran on pool %s", a.Attempt, a.Pool)
		}
	}
}

// A second pool inside the same country: residency alone would let it run
// the first pool's jobs.
var dePool = local.PoolConfig{Pool: "eu-cpu-b", Region: "eu-test-2", Country: "DE", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: "on-demand", PricePerHour: "0.30"}

func TestRunOrderForAnotherPoolInsideTheResidencyIsNotClaimedThere(t *testing.T) {
	t.Parallel()
	c := newClusterOf(t, testPool, dePool)
	ctx := context.Background()
	id, placed := c.placeEUJob(t)
	c.startPoolWorker(t, dePool, 5*time.Second, time.Second)
	order, _ := json.Marshal(queue.RunOrder{JobID: id, PlacementVersion: placed.PlacementVersion, Pool: dePool.Pool})
	subject := queue.RunSubject(dePool.Pool, id.String())
	if _, err := c.n.JS.Publish(ctx, subject, order); err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, 30*time.Second, "the other pool's worker to drop the order", func() bool {
		_, held := queuetest.RunMessages(t, c.n.JS)[subject]
		return !held
	})
	if j := c.job(t, id); j.State != queue.StatePlaced || len(c.attempts(t, id)) != 0 {
		t.Fatalf("a worker of pool %s must not claim a job placed on %s: %+v", dePool.Pool, testPool.Pool, j)
	}
	c.startWorker(t, 5*time.Second, time.Second)
	c.waitState(t, id, queue.StateSucceeded, 60*time.Second)
	if a := c.attempts(t, id); len(a) != 1 || a[0].Pool != testPool.Pool {
		t.Fatalf("want one attempt on %s, got %+v", testPool.Pool, a)
	}
}

func TestSchedulerKilledMidStreamLosesNothingAndDispatchesNothingTwice(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	store, dbURL := queuetest.Store(t, n)
	server := func() *exec.Cmd {
		cmd := n.ServerCommand(t, gpuqBin, dbURL)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() }) //nolint:errcheck // stopping
		return cmd
	}
	first := server()
	const jobs = 400
	submitted := make(chan error, 1)
	go func() {
		for i := range jobs {
			s, err := queue.ParseSpec([]byte(fmt.Sprintf("name: j%d\ncommand: [/bin/true]\n", i)))
			if err == nil {
				_, err = queue.Submit(context.Background(), n.JS, s)
			}
			if err != nil {
				submitted <- err
				return
			}
		}
		submitted <- nil
	}()
	count := func() int {
		var c int
		store.DB.QueryRow(`SELECT count(*) FROM jobs`).Scan(&c) //nolint:errcheck // zero on error
		return c
	}
	queuetest.Eventually(t, 60*time.Second, "the scheduler to record some jobs", func() bool { return count() > 20 })
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	first.Wait() //nolint:errcheck // killed
	t.Logf("scheduler killed after recording %d jobs", count())
	if err := <-submitted; err != nil {
		t.Fatal(err)
	}
	server()
	// Submissions the killed scheduler took but did not acknowledge come
	// back after the consumer's AckWait (10 s); once the submission stream
	// is empty every one of them has been handled, so the dispatch counts
	// below are final.
	queuetest.Eventually(t, 180*time.Second, "every submission to be handled", func() bool {
		return queuetest.StreamMessages(t, n.JS, queue.StreamSubmit) == 0
	})
	queuetest.Eventually(t, 30*time.Second, "every job to be placed", func() bool {
		var placed int
		store.DB.QueryRow(`SELECT count(*) FROM jobs WHERE state = 'placed'`).Scan(&placed) //nolint:errcheck // zero on error
		return placed == jobs
	})
	if got := count(); got != jobs {
		t.Fatalf("want %d jobs, got %d", jobs, got)
	}
	msgs := queuetest.RunMessages(t, n.JS)
	if len(msgs) != jobs {
		t.Fatalf("want %d dispatched jobs, got %d", jobs, len(msgs))
	}
	for subject, m := range msgs {
		if m != 1 {
			t.Fatalf("%s was dispatched %d times", subject, m)
		}
	}
}

func TestFailedCanaryQuarantinesTheNodeWhichTakesNoWork(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	id := c.submit(t, "name: waits\ncommand: [/bin/true]\n")
	c.waitState(t, id, queue.StatePlaced, 30*time.Second)
	// This machine has no NVIDIA driver, so a pool expecting H100s fails.
	canaryArgs := []string{"--expect-card", "H100", "--quarantine-after", "2", "--canary-retry-after", "100ms", "--instance-id", "i-test-1"}
	w := c.startWorker(t, 5*time.Second, time.Second, canaryArgs...)
	err := w.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("a quarantined worker must exit with status 3, got %v", err)
	}
	nodes, err := c.store.Nodes(context.Background(), "")
	if err != nil || len(nodes) != 1 {
		t.Fatalf("want one node, got %v (%v)", nodes, err)
	}
	n := nodes[0]
	if n.ID != "i-test-1" || n.CanaryRuns != 2 || n.CanaryFailures != 2 || n.QuarantinedAt == nil ||
		!strings.Contains(n.LastCanarySummary, "no NVIDIA driver") {
		t.Fatalf("node record: %+v", n)
	}
	if j := c.job(t, id); j.State != queue.StatePlaced || j.Attempt != 0 {
		t.Fatalf("a failing node must take no work: %+v", j)
	}
	// The node's record counts across restarts: a new worker there refuses
	// at once, without running the canary again.
	again := c.startWorker(t, 5*time.Second, time.Second, canaryArgs...)
	if err := again.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("a worker on a quarantined node must exit with status 3, got %v", err)
	}
	out := runCLI(t, 0, "nodes", "--nats-url", c.n.URL)
	if !strings.Contains(out, "i-test-1") || !strings.Contains(out, "100%") {
		t.Fatalf("gpuq nodes must list the node with its failure rate:\n%s", out)
	}
}

func TestSubmitWaitExitsZeroOnlyOnSuccess(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startWorker(t, 5*time.Second, time.Second)
	conn := []string{"--nats-url", c.n.URL}
	out := runCLI(t, 0, append(append([]string{"submit", "--wait", "--name", "ok"}, conn...), "--", "echo", "hi")...)
	if !strings.Contains(out, "succeeded") {
		t.Fatalf("submit --wait must report success:\n%s", out)
	}
	out = runCLI(t, cli.ExitFailed, append(append([]string{"submit", "--wait", "--name", "bad", "--max-errors", "0"}, conn...), "--", "sh", "-c", "exit 4")...)
	if !strings.Contains(out, "failed") || !strings.Contains(out, "exited with status 4") {
		t.Fatalf("submit --wait must report the failure and its reason:\n%s", out)
	}
}

func TestTwoServersShareTheWorkerServiceAndKillingOneLosesOrDuplicatesNoRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("200 jobs through two server processes")
	}
	t.Parallel()
	n := queuetest.StartNATS(t)
	st, dbURL := queuetest.Store(t, n)
	// Two servers as deploy/systemd runs them: the same flags and config,
	// but for the silence after which a worker is declared lost. This test
	// counts attempts exactly, and on a loaded 2-core machine a worker's
	// beats can stall past the default 700 ms (seen in CI: the worker
	// logged "liveness beats stalled" with a gap of 748 ms, and its jobs
	// were handed back, rightly, and ran again). The hand-back of a lost
	// worker's jobs has tests of its own (a worker SIGKILLed, one SIGSTOPped).
	cfg := testPoolConfig(t, "liveness: {lost_after: 3s}\n")
	first := startServer(t, "server-1", n, dbURL, cfg)
	startServer(t, "server-2", n, dbURL, cfg)
	queuetest.Eventually(t, 60*time.Second, "both servers to serve the worker service", func() bool {
		msg, err := n.NC.Request("$SRV.PING."+queue.WorkerServiceName, nil, 2*time.Second)
		if err != nil {
			return false
		}
		sub, err := n.NC.SubscribeSync(n.NC.NewRespInbox())
		if err != nil {
			return false
		}
		defer sub.Unsubscribe() //nolint:errcheck // test cleanup
		if err := n.NC.PublishRequest("$SRV.PING."+queue.WorkerServiceName, sub.Subject, nil); err != nil {
			return false
		}
		seen := 0
		for {
			if _, err := sub.NextMsg(time.Second); err != nil {
				break
			}
			seen++
		}
		return msg != nil && seen == 2
	})
	c := &cluster{n: n, store: st, dbURL: dbURL}
	c.startWorker(t, 10*time.Second, time.Second, "--slots", "8")
	c.startWorker(t, 10*time.Second, time.Second, "--slots", "8")
	const jobs = 200
	spec := "command: [sh, -c, 'echo $GPUQ_JOB_ID > $GPUQ_CHECKPOINT_DIR/step && gpuq checkpoint save && sleep 0.1']\n"
	ids := make([]uuid.UUID, jobs)
	for i := range ids {
		ids[i] = c.submit(t, spec)
	}
	succeeded := func() int {
		var k int
		st.DB.QueryRow(`SELECT count(*) FROM jobs WHERE state = 'succeeded'`).Scan(&k) //nolint:errcheck // zero on error
		return k
	}
	queuetest.Eventually(t, 120*time.Second, "some jobs to succeed", func() bool { return succeeded() >= 30 })
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("server-1 killed after %d jobs succeeded", succeeded())
	queuetest.Eventually(t, 240*time.Second, "every job to succeed", func() bool { return succeeded() == jobs })
	for _, id := range ids {
		attempts := c.attempts(t, id)
		if len(attempts) != 1 || attempts[0].Outcome != queue.OutcomeSucceeded {
			t.Errorf("job %s: want one succeeded attempt (no claim lost or repeated), got %+v", id, attempts)
		}
		cps := c.checkpoints(t, id)
		if len(cps) != 1 || cps[0].Seq != 1 {
			t.Errorf("job %s: want one checkpoint record, got %+v", id, cps)
		}
		var events int
		st.DB.QueryRow(`SELECT count(*) FROM job_events WHERE job_id = $1 AND state = 'succeeded'`, id).Scan(&events) //nolint:errcheck // zero on error
		if events != 1 {
			t.Errorf("job %s: %d completion records", id, events)
		}
	}
}
