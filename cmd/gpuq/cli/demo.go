package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/pgtemp"
)

func newDemoCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run gpuq end to end on this machine and check that it keeps its promises",
		Long: `demo starts an embedded NATS server, a private PostgreSQL cluster (or uses --database-url /
GPUQ_DATABASE_URL), the control plane and two worker processes in a temporary directory. It
submits five jobs: hello (writes an output file), train (checkpoints every step), flaky (fails
once, then succeeds), eu (residency EU) and us (asks for us-* regions, which no pool offers).
Once train has committed checkpoint 3 the worker running it is SIGKILLed; another worker resumes
it from its latest checkpoint. demo prints every state change, a summary table, and exits 0 only
when every job ended as expected. A database-url in a config file is ignored, so the demo never
writes into the database of a running gpuq dev.`,
		Args: cobra.NoArgs,
		RunE: runDemo,
	}
	f := cmd.Flags()
	f.String("data-dir", "", "where the demo keeps NATS, PostgreSQL and worker state (default: a new temporary directory)")
	f.Bool("keep", false, "keep the data directory (and its demo.log) instead of removing it")
	f.String("database-url", "", "PostgreSQL URL (env GPUQ_DATABASE_URL); default: a private cluster in the data directory")
	f.Duration("ack-wait", 4*time.Second, "AckWait and lease of the demo's workers: how soon a SIGKILLed worker's job is redelivered")
	f.Duration("grace", 3*time.Second, "time a job gets after SIGTERM when the workers stop")
	f.Duration("timeout", 110*time.Second, "give up when the jobs have not all finished by then")
	f.String("executable", "", "gpuq binary to start workers from (default: this one)")
	if err := f.MarkHidden("executable"); err != nil {
		panic(err)
	}
	return cmd
}

// Demo expectations.
const (
	demoTrainSteps   = 20
	demoKillAfterSeq = 3
	demoWorkers      = 2
	demoProject      = "demo"
)

// demoJob is one job the demo submits and the state it must end in.
type demoJob struct {
	Name string
	Spec string
	Want queue.JobState
}

// demoJobs are the demo's specs; run makes their idempotency keys unique to
// one run, so a shared database never confuses two demos.
func demoJobs(run string) []demoJob {
	spec := func(name, body, script string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "name: %s\nproject: %s\nidempotency_key: %s-%s\nresources: {cpu: 1, memory_gb: 1}\n", name, demoProject, run, name)
		b.WriteString(body)
		b.WriteString("command: |\n")
		for _, line := range strings.Split(strings.TrimSpace(script), "\n") {
			b.WriteString("  " + line + "\n")
		}
		return b.String()
	}
	return []demoJob{
		{Name: "hello", Want: queue.StateSucceeded, Spec: spec("hello", "", `
echo "hello from job $GPUQ_JOB_ID on pool $GPUQ_POOL" | tee "$GPUQ_OUTPUT_DIR/hello.txt"`)},
		{Name: "train", Want: queue.StateSucceeded, Spec: spec("train", "retries: {max_errors: 0}\n", fmt.Sprintf(`
set -e
step=0
if [ -f "$GPUQ_CHECKPOINT_DIR/step" ]; then step=$(cat "$GPUQ_CHECKPOINT_DIR/step"); fi
echo "resumed=$GPUQ_RESUMED from step $step"
while [ "$step" -lt %d ]; do
  sleep 0.3
  step=$((step + 1))
  echo "$step" > "$GPUQ_CHECKPOINT_DIR/step"
  seq=$(gpuq checkpoint save)
  echo "step $step committed as checkpoint $seq"
done
echo "trained $step steps" > "$GPUQ_OUTPUT_DIR/model.txt"
echo "finished at step $step"`, demoTrainSteps))},
		{Name: "flaky", Want: queue.StateSucceeded, Spec: spec("flaky", "retries: {max_errors: 2, delay: 1s}\n", `
echo "attempt $GPUQ_ATTEMPT"
if [ "$GPUQ_ATTEMPT" = 1 ]; then echo "simulated failure on the first attempt" >&2; exit 3; fi
echo ok > "$GPUQ_OUTPUT_DIR/ok.txt"`)},
		{Name: "eu", Want: queue.StateSucceeded, Spec: spec("eu", "placement: {residency: EU}\n", `
echo "running in region $GPUQ_REGION"`)},
		{Name: "us", Want: queue.StateRejected, Spec: spec("us", "placement: {regions: [\"us-*\"]}\n", `
echo "this job asks for a region no pool offers"`)},
	}
}

var (
	demoCheckpointLine = regexp.MustCompile(`^step (\d+) committed as checkpoint (\d+)$`)
	demoResumedLine    = regexp.MustCompile(`^resumed=1 from step (\d+)$`)
)

// DemoReport is what `gpuq demo -o json` prints.
type DemoReport struct {
	ElapsedSeconds float64         `json:"elapsed_seconds"`
	Jobs           []DemoJobResult `json:"jobs"`
	Train          DemoTrain       `json:"train"`
	// Autoscale is the autoscaling act on the simulated cloud.
	Autoscale *DemoAutoscale `json:"autoscale,omitempty"`
	// Problems lists every expectation that did not hold; empty on success.
	Problems []string `json:"problems,omitempty"`
}

// DemoJobResult is one job as PostgreSQL recorded it.
type DemoJobResult struct {
	Name        string          `json:"name"`
	ID          uuid.UUID       `json:"id"`
	Want        queue.JobState  `json:"want"`
	State       queue.JobState  `json:"state"`
	Attempts    []queue.Attempt `json:"attempts"`
	Checkpoints int             `json:"checkpoints"`
	Pool        string          `json:"pool,omitempty"`
	Residency   string          `json:"residency,omitempty"`
	Countries   []string        `json:"countries,omitempty"`
	ExitCode    *int            `json:"exit_code,omitempty"`
	Reason      string          `json:"reason,omitempty"`
	// Output is the first line of the job's output file, when it has one.
	Output string `json:"output,omitempty"`
}

// DemoTrain is what happened to the train job around the SIGKILL.
type DemoTrain struct {
	KilledWorkerPID int `json:"killed_worker_pid"`
	// Checkpoints is the job's checkpoint sequence with the attempt that
	// committed each one.
	Checkpoints []DemoCheckpoint `json:"checkpoints"`
	// LastSeqOfFirstAttempt is the last checkpoint the killed attempt committed.
	LastSeqOfFirstAttempt int `json:"last_seq_of_first_attempt"`
	// StepInCheckpoint is the step stored inside that checkpoint's archive.
	StepInCheckpoint int `json:"step_in_checkpoint"`
	// ResumedFromStep is N of the `resumed=1 from step N` log line; -1 when
	// no such line was logged.
	ResumedFromStep int `json:"resumed_from_step"`
}

// DemoCheckpoint is one entry of a checkpoint sequence.
type DemoCheckpoint struct {
	Seq     int `json:"seq"`
	Attempt int `json:"attempt"`
}

// check compares the outcome with the demo's promises and records every
// difference in r.Problems.
func (r *DemoReport) check() {
	r.Problems = nil
	bad := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }
	for _, j := range r.Jobs {
		if j.State != j.Want {
			bad("%s: ended %s, want %s (%s)", j.Name, j.State, j.Want, orDash(j.Reason))
		}
		switch j.Name {
		case "hello":
			if j.Output == "" {
				bad("hello: its output file was not stored")
			}
		case "flaky":
			if len(j.Attempts) < 2 || j.Attempts[0].ExitCode == nil || *j.Attempts[0].ExitCode != 3 {
				bad("flaky: want a first attempt that exited 3 and a retry, got %s", attemptSummary(j.Attempts))
			}
		case "eu":
			if j.Residency != "EU" || !slices.Contains(j.Countries, "DE") {
				bad("eu: placed under residency %q (countries %v), want EU including DE", j.Residency, j.Countries)
			}
		case "us":
			if j.Reason == "" {
				bad("us: rejected without a reason")
			}
		case "train":
			if len(j.Attempts) != 2 {
				bad("train: %d attempts, want 2 (one killed, one resumed)", len(j.Attempts))
			}
		}
	}
	t := r.Train
	if t.LastSeqOfFirstAttempt < demoKillAfterSeq {
		bad("train: the killed attempt committed up to checkpoint %d, want at least %d", t.LastSeqOfFirstAttempt, demoKillAfterSeq)
	}
	if t.ResumedFromStep != t.LastSeqOfFirstAttempt || t.StepInCheckpoint != t.LastSeqOfFirstAttempt {
		bad("train: resumed from step %d, want step %d of checkpoint %d (which holds step %d)",
			t.ResumedFromStep, t.LastSeqOfFirstAttempt, t.LastSeqOfFirstAttempt, t.StepInCheckpoint)
	}
	for i := 1; i < len(t.Checkpoints); i++ {
		if t.Checkpoints[i].Seq <= t.Checkpoints[i-1].Seq || t.Checkpoints[i].Attempt < t.Checkpoints[i-1].Attempt {
			bad("train: checkpoint sequence went back at %d", t.Checkpoints[i].Seq)
		}
	}
	if n := len(t.Checkpoints); n != demoTrainSteps {
		bad("train: %d checkpoints, want one per step (%d)", n, demoTrainSteps)
	}
}

// demoRun is the state of one run of the demo.
type demoRun struct {
	out      io.Writer
	start    time.Time
	c        *clients
	launcher *local.Launcher
	pools    map[string]local.PoolConfig
	workDir  string

	mu        sync.Mutex
	workers   []*local.Instance
	killedPID int
}

func runDemo(cmd *cobra.Command, _ []string) error {
	v, format, err := loadConfigFormat(cmd)
	if err != nil {
		return err
	}
	fl := cmd.Flags()
	dbURL, _ := fl.GetString("database-url")
	if !fl.Changed("database-url") {
		dbURL = os.Getenv("GPUQ_DATABASE_URL")
	}
	exe := v.GetString("executable")
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return err
		}
	}
	progress := cmd.OutOrStdout()
	if format == "json" {
		progress = cmd.ErrOrStderr()
	}
	d := &demoRun{out: progress, start: time.Now(), pools: map[string]local.PoolConfig{}}
	for _, p := range defaultPools() {
		d.pools[p.Pool] = p
	}

	dir := v.GetString("data-dir")
	if dir == "" {
		if dir, err = os.MkdirTemp("", "gpuq-demo-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(dir, "demo.log"))
	if err != nil {
		return err
	}
	keep := v.GetBool("keep")
	report, runErr := d.run(cmd.Context(), dir, dbURL, exe, logFile, v)
	logFile.Close()
	if report != nil {
		// Measured after every process has stopped: the whole demo.
		report.ElapsedSeconds = time.Since(d.start).Seconds()
	}
	if runErr == nil && len(report.Problems) == 0 && !keep {
		if err := os.RemoveAll(dir); err != nil {
			d.say("could not remove %s: %v", dir, err)
		}
	} else {
		d.say("data directory kept: %s (worker and control-plane logs in demo.log)", dir)
	}
	if runErr != nil {
		return fmt.Errorf("demo: %w", runErr)
	}
	if format == "json" {
		if err := writeJSON(cmd.OutOrStdout(), report); err != nil {
			return err
		}
	} else if err := printDemoReport(cmd.OutOrStdout(), report); err != nil {
		return err
	}
	if len(report.Problems) > 0 {
		return fmt.Errorf("demo: %d expectation(s) not met:\n  %s", len(report.Problems), strings.Join(report.Problems, "\n  "))
	}
	return nil
}

// say prints one progress line stamped with the time since the start.
func (d *demoRun) say(format string, args ...any) {
	fmt.Fprintf(d.out, "[%5.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// run starts the stack, runs the scenario and stops everything it started.
func (d *demoRun) run(parent context.Context, dir, dbURL, exe string, logFile *os.File, v *viper.Viper) (*DemoReport, error) {
	ctx, stop := shutdownContext(parent)
	defer stop()
	logger := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))

	if dbURL == "" {
		d.say("starting embedded NATS and a private PostgreSQL cluster in %s", dir)
	} else {
		d.say("starting embedded NATS in %s; PostgreSQL at the given URL", dir)
	}
	stack, err := startDevStack(ctx, dir, dbURL, 0, pgtemp.Options{Password: true}, logger)
	if err != nil {
		return nil, err
	}
	defer func() {
		stack.Stop()
		if stack.pg != nil {
			d.say("stopped NATS and PostgreSQL")
		} else {
			d.say("stopped NATS")
		}
	}()

	// The control plane sees only the demo's connections: pools and policy
	// rules from a config file would change what the demo proves.
	cv := viper.New()
	stack.configure(cv)
	cpCtx, stopCP := context.WithCancel(ctx)
	defer stopCP()
	c, err := startControlPlane(cpCtx, cv, logger)
	if err != nil {
		return nil, err
	}
	defer func() {
		stopCP()
		c.Close()
	}()
	d.c = c
	d.say("control plane running (scheduler, reconciler, policy placer over pools %s)", strings.Join(slices.Sorted(maps.Keys(d.pools)), ", "))

	d.workDir = filepath.Join(dir, "work")
	d.launcher = &local.Launcher{Executable: exe, Slots: 1, Output: logFile, PoolEnv: stack.workerEnv, Args: []string{
		"--nats-url", stack.natsURL,
		"--ack-wait", v.GetDuration("ack-wait").String(), "--grace", v.GetDuration("grace").String(),
		"--data-dir", d.workDir,
	}}
	defer d.stopWorkers(v.GetDuration("grace") + 10*time.Second)

	runCtx, cancel := context.WithTimeout(ctx, v.GetDuration("timeout"))
	defer cancel()
	report, err := d.scenario(runCtx)
	if err != nil {
		return nil, err
	}
	// The autoscaling act runs its own control plane, over the simulated
	// cloud, on the same NATS and PostgreSQL.
	stopCP()
	d.stopWorkers(v.GetDuration("grace") + 10*time.Second)
	var problems []string
	report.Autoscale, problems, err = d.autoscaleAct(runCtx, stack, dir, exe, logFile, logger)
	report.Problems = append(report.Problems, problems...)
	return report, err
}

// demoSubmitted is a submitted demo job and the latest state seen for it.
type demoSubmitted struct {
	demoJob
	id    uuid.UUID
	state queue.JobState
}

type demoEvent struct {
	job *demoSubmitted
	ev  queue.Event
}

// scenario submits the jobs, starts the workers once the jobs are placed,
// kills the train job's worker after its checkpoint 3, and waits for every
// job to finish. Progress comes from job events and the train job's log
// stream, never from polling PostgreSQL.
func (d *demoRun) scenario(ctx context.Context) (*DemoReport, error) {
	followCtx, stopFollowing := context.WithCancel(ctx)
	defer stopFollowing()
	run := "demo-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	events := make(chan demoEvent, 64)
	followErr := make(chan error, 8)
	var jobs []*demoSubmitted
	var train *demoSubmitted
	for _, dj := range demoJobs(run) {
		spec, err := queue.ParseSpec([]byte(dj.Spec))
		if err != nil {
			return nil, fmt.Errorf("demo job %s: %w", dj.Name, err)
		}
		sub, err := queue.Submit(ctx, d.c.js, spec)
		if err != nil {
			return nil, err
		}
		j := &demoSubmitted{demoJob: dj, id: sub.JobID}
		jobs = append(jobs, j)
		if dj.Name == "train" {
			train = j
		}
		d.say("submitted %-5s %s", dj.Name, sub.JobID)
		go func() {
			err := queue.FollowEvents(followCtx, d.c.js, j.id, func(ev queue.Event) bool {
				select {
				case events <- demoEvent{job: j, ev: ev}:
				case <-followCtx.Done():
					return false
				}
				return !ev.State.Terminal()
			})
			if err != nil && followCtx.Err() == nil {
				followErr <- err
			}
		}()
	}

	var trainDone atomic.Bool
	lines := make(chan string, 256)
	go func() {
		w := &lineSink{ctx: followCtx, lines: lines}
		err := queue.ReadLogs(followCtx, d.c.js, train.id, w, true, trainDone.Load)
		if err != nil && followCtx.Err() == nil {
			followErr <- err
		}
	}()

	workersStarted, killed := false, false
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("jobs still unfinished when the demo gave up (%v): %s", ctx.Err(), demoStates(jobs))
		case err := <-followErr:
			return nil, err
		case line := <-lines:
			fmt.Fprintf(d.out, "          train | %s\n", line)
			m := demoCheckpointLine.FindStringSubmatch(line)
			if killed || m == nil {
				continue
			}
			if seq, _ := strconv.Atoi(m[2]); seq >= demoKillAfterSeq {
				if err := d.killWorkerOf(ctx, train); err != nil {
					return nil, err
				}
				killed = true
			}
		case e := <-events:
			e.job.state = e.ev.State
			d.say("%-5s %-9s attempt %d  %s", e.job.Name, e.ev.State, e.ev.Attempt, e.ev.Message)
			if e.job == train && e.ev.State.Terminal() {
				trainDone.Store(true)
			}
			if !workersStarted && placedAll(jobs) {
				if err := d.startWorkers(ctx, jobs); err != nil {
					return nil, err
				}
				workersStarted = true
			}
			if allTerminal(jobs) {
				if !killed && train.state == queue.StateSucceeded {
					return nil, fmt.Errorf("train finished before checkpoint %d was seen, so its worker was never killed", demoKillAfterSeq)
				}
				stopFollowing()
				return d.report(ctx, jobs, train)
			}
		}
	}
}

func placedAll(jobs []*demoSubmitted) bool {
	for _, j := range jobs {
		if j.state == "" || j.state == queue.StatePending {
			return false
		}
	}
	return true
}

func allTerminal(jobs []*demoSubmitted) bool {
	for _, j := range jobs {
		if !j.state.Terminal() {
			return false
		}
	}
	return true
}

func demoStates(jobs []*demoSubmitted) string {
	parts := make([]string, len(jobs))
	for i, j := range jobs {
		parts[i] = j.Name + "=" + string(orDashState(j.state))
	}
	return strings.Join(parts, " ")
}

func orDashState(s queue.JobState) queue.JobState {
	if s == "" {
		return "unseen"
	}
	return s
}

// lineSink turns a log stream into lines on a channel.
type lineSink struct {
	ctx     context.Context
	lines   chan<- string
	partial []byte
}

func (s *lineSink) Write(p []byte) (int, error) {
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(s.partial[:i])
		s.partial = s.partial[i+1:]
		select {
		case s.lines <- line:
		case <-s.ctx.Done():
			return 0, s.ctx.Err()
		}
	}
}

// startWorkers starts demoWorkers workers for each pool the jobs were
// placed on.
func (d *demoRun) startWorkers(ctx context.Context, jobs []*demoSubmitted) error {
	var pools []string
	for _, j := range jobs {
		if j.state == queue.StateRejected {
			continue
		}
		job, err := d.c.store.Job(ctx, j.id)
		if err != nil {
			return err
		}
		if job.Pool != "" && !slices.Contains(pools, job.Pool) {
			pools = append(pools, job.Pool)
		}
	}
	for _, name := range pools {
		pool, ok := d.pools[name]
		if !ok {
			return fmt.Errorf("a job was placed on pool %s, which the demo does not run", name)
		}
		var pids []string
		for range demoWorkers {
			inst, err := d.launch(ctx, pool)
			if err != nil {
				return err
			}
			pids = append(pids, strconv.Itoa(inst.PID()))
		}
		d.say("started %d workers of pool %s (region %s, country %s): pids %s", demoWorkers, pool.Pool, pool.Region, pool.Country, strings.Join(pids, ", "))
	}
	return nil
}

func (d *demoRun) launch(ctx context.Context, pool local.PoolConfig) (*local.Instance, error) {
	// The workers outlive ctx's cancellation only until stopWorkers, which
	// sends SIGTERM and waits; their own context must not kill them first.
	inst, err := d.launcher.Launch(context.WithoutCancel(ctx), pool)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.workers = append(d.workers, inst)
	d.mu.Unlock()
	return inst, nil
}

// killWorkerOf SIGKILLs the worker process running job's current attempt,
// as a lost host would vanish, and starts a replacement.
func (d *demoRun) killWorkerOf(ctx context.Context, job *demoSubmitted) error {
	cps, err := d.c.store.Checkpoints(ctx, job.id)
	if err != nil {
		return err
	}
	attempts, err := d.c.store.Attempts(ctx, job.id)
	if err != nil {
		return err
	}
	if len(attempts) == 0 || attempts[len(attempts)-1].EndedAt != nil {
		return fmt.Errorf("%s has no running attempt to kill", job.Name)
	}
	a := attempts[len(attempts)-1]
	d.mu.Lock()
	var inst *local.Instance
	for _, w := range d.workers {
		if w.PID() == a.PID {
			inst = w
		}
	}
	d.mu.Unlock()
	if inst == nil {
		return fmt.Errorf("%s attempt %d runs in pid %d, which is not one of the demo's workers", job.Name, a.Attempt, a.PID)
	}
	if err := inst.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing worker %d: %w", a.PID, err)
	}
	last := 0
	if len(cps) > 0 {
		last = cps[len(cps)-1].Seq
	}
	d.killedPID = a.PID
	d.say("SIGKILL worker pid %d running %s attempt %d (checkpoints committed so far: %d)", a.PID, job.Name, a.Attempt, last)
	<-inst.Done()
	pool := d.pools[a.Pool]
	repl, err := d.launch(ctx, pool)
	if err != nil {
		return err
	}
	d.say("started replacement worker pid %d of pool %s; the job is redelivered once its lease and AckWait lapse", repl.PID(), pool.Pool)
	return nil
}

// stopWorkers sends SIGTERM to every live worker and waits for them,
// killing any that outlast wait.
func (d *demoRun) stopWorkers(wait time.Duration) {
	d.mu.Lock()
	workers := slices.Clone(d.workers)
	d.mu.Unlock()
	live := 0
	for _, w := range workers {
		select {
		case <-w.Done():
			continue
		default:
		}
		live++
		w.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited meanwhile
	}
	deadline := time.After(wait)
	for _, w := range workers {
		select {
		case <-w.Done():
		case <-deadline:
			w.Signal(syscall.SIGKILL) //nolint:errcheck // it may have exited meanwhile
			<-w.Done()
		}
	}
	if live > 0 {
		d.say("stopped %d workers (SIGTERM)", live)
	}
}

// report reads every job's outcome from PostgreSQL, its logs and outputs
// from JetStream, and checks them against the demo's promises.
func (d *demoRun) report(ctx context.Context, jobs []*demoSubmitted, train *demoSubmitted) (*DemoReport, error) {
	r := &DemoReport{}
	store := d.c.store
	for _, j := range jobs {
		job, err := store.Job(ctx, j.id)
		if err != nil {
			return nil, err
		}
		res := DemoJobResult{Name: j.Name, ID: j.id, Want: j.Want, State: job.State, Pool: job.Pool, ExitCode: job.ExitCode, Reason: job.Reason}
		if res.Attempts, err = store.Attempts(ctx, j.id); err != nil {
			return nil, err
		}
		cps, err := store.Checkpoints(ctx, j.id)
		if err != nil {
			return nil, err
		}
		res.Checkpoints = len(cps)
		if p, err := store.LatestPlacement(ctx, j.id); err == nil {
			res.Residency, res.Countries = p.Residency, p.Countries
		} else if !errors.Is(err, queue.ErrNotFound) {
			return nil, err
		}
		if job.State == queue.StateSucceeded {
			if res.Output, err = d.firstOutputLine(ctx, j.id); err != nil {
				return nil, err
			}
		}
		if j == train {
			if err := d.trainReport(ctx, &r.Train, j.id, cps); err != nil {
				return nil, err
			}
		}
		r.Jobs = append(r.Jobs, res)
	}
	r.Train.KilledWorkerPID = d.killedPID
	r.check()
	return r, nil
}

// firstOutputLine downloads a job's outputs and returns the first line of
// the first file in them, or "" when it stored none.
func (d *demoRun) firstOutputLine(ctx context.Context, id uuid.UUID) (string, error) {
	rec, err := d.c.store.Result(ctx, id)
	if errors.Is(err, queue.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	dir := filepath.Join(d.workDir, "results", id.String())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := fetchArchive(ctx, archiveStore(d.c), rec, dir); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return "", err
	}
	body, err := os.ReadFile(filepath.Join(dir, entries[0].Name()))
	if err != nil {
		return "", err
	}
	first, _, _ := strings.Cut(string(body), "\n")
	return entries[0].Name() + ": " + first, nil
}

// trainReport fills t from the train job's checkpoints, the contents of the
// last one its killed attempt committed, and its log.
func (d *demoRun) trainReport(ctx context.Context, t *DemoTrain, job uuid.UUID, cps []queue.Checkpoint) error {
	t.ResumedFromStep = -1
	var last *queue.Checkpoint
	for i, cp := range cps {
		t.Checkpoints = append(t.Checkpoints, DemoCheckpoint{Seq: cp.Seq, Attempt: cp.Attempt})
		if cp.Attempt == 1 {
			last = &cps[i]
		}
	}
	if last == nil {
		return nil
	}
	t.LastSeqOfFirstAttempt = last.Seq
	dir := filepath.Join(d.workDir, "restored", strconv.Itoa(last.Seq))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rec := &queue.ArchiveRecord{Bytes: last.Bytes, SHA256: last.SHA256, Region: last.Region, StoreURI: last.StoreURI}
	if err := fetchArchive(ctx, archiveStore(d.c), rec, dir); err != nil {
		return fmt.Errorf("downloading checkpoint %d: %w", last.Seq, err)
	}
	body, err := os.ReadFile(filepath.Join(dir, "step"))
	if err != nil {
		return err
	}
	if t.StepInCheckpoint, err = strconv.Atoi(strings.TrimSpace(string(body))); err != nil {
		return fmt.Errorf("checkpoint %d holds step %q: %w", last.Seq, body, err)
	}
	var log bytes.Buffer
	if err := queue.ReadLogs(ctx, d.c.js, job, &log, false, nil); err != nil {
		return err
	}
	for _, line := range strings.Split(log.String(), "\n") {
		if m := demoResumedLine.FindStringSubmatch(line); m != nil {
			t.ResumedFromStep, _ = strconv.Atoi(m[1])
		}
	}
	return nil
}

func attemptSummary(attempts []queue.Attempt) string {
	if len(attempts) == 0 {
		return "no attempts"
	}
	parts := make([]string, len(attempts))
	for i, a := range attempts {
		s := fmt.Sprintf("a%d %s", a.Attempt, orDash(a.Outcome))
		if a.ExitCode != nil {
			s += fmt.Sprintf(" (exit %d)", *a.ExitCode)
		}
		parts[i] = s
	}
	return strings.Join(parts, ", ")
}

func printDemoReport(w io.Writer, r *DemoReport) error {
	fmt.Fprintln(w)
	t := newTable(w, "JOB", "STATE", "ATTEMPTS", "CHECKPOINTS", "POOL", "EXIT/REASON")
	for _, j := range r.Jobs {
		detail := j.Reason
		if j.State != queue.StateRejected {
			detail = attemptSummary(j.Attempts)
		}
		t.row(j.Name, j.State, len(j.Attempts), j.Checkpoints, orDash(j.Pool), detail)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, j := range r.Jobs {
		if j.Output != "" {
			fmt.Fprintf(w, "%-18s %s\n", j.Name+" output", j.Output)
		}
		if j.Residency != "" {
			fmt.Fprintf(w, "%-18s residency %s (%d countries, DE among them: %t) on pool %s\n", j.Name+" placement", j.Residency, len(j.Countries), slices.Contains(j.Countries, "DE"), j.Pool)
		}
	}
	tr := r.Train
	var seq []string
	for _, cp := range tr.Checkpoints {
		seq = append(seq, fmt.Sprintf("%d(a%d)", cp.Seq, cp.Attempt))
	}
	fmt.Fprintf(w, "train checkpoints  %s\n", strings.Join(seq, " "))
	fmt.Fprintf(w, "train resume       worker pid %d SIGKILLed after checkpoint %d (holding step %d); attempt 2 logged resumed=1 from step %d\n",
		tr.KilledWorkerPID, tr.LastSeqOfFirstAttempt, tr.StepInCheckpoint, tr.ResumedFromStep)
	if r.Autoscale != nil {
		if err := printDemoAutoscale(w, r.Autoscale); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "elapsed            %.1fs, start-up and shutdown included\n", r.ElapsedSeconds)
	if len(r.Problems) == 0 {
		fmt.Fprintln(w, "result             every expectation held")
	}
	return nil
}
