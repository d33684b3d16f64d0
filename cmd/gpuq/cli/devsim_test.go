package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/policy/spot"
	"github.com/gpuq/gpuq/queue"
)

// tracesDir is the published spot traces, read where they lie (the
// GPUQ_TRACES variable, else ../shared/traces beside the repository).
func tracesDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GPUQ_TRACES")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "..", "shared", "traces")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("no spot traces at %s (set GPUQ_TRACES): %v", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// syncBuffer collects a process's output while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

const simTrainSpec = `name: spot-train
resources: {gpu: {count: 1, cards: [V100]}}
placement: {tier: spot-then-on-demand}
retries: {max_errors: 0}
command: |
  step=0
  if [ -f "$GPUQ_CHECKPOINT_DIR/step" ]; then step=$(cat "$GPUQ_CHECKPOINT_DIR/step"); fi
  echo "attempt $GPUQ_ATTEMPT on $GPUQ_POOL resumed=$GPUQ_RESUMED from step $step final=$(cat "$GPUQ_CHECKPOINT_DIR/final" 2>/dev/null)"
  trap 'echo "$step" > "$GPUQ_CHECKPOINT_DIR/step"; echo yes > "$GPUQ_CHECKPOINT_DIR/final"; seq=$(gpuq checkpoint save); echo "notice: saved step $step as checkpoint $seq"; exit 143' TERM
  if [ "$GPUQ_ATTEMPT" -gt 1 ]; then end=$((step + 3)); else end=100000; fi
  while [ "$step" -lt "$end" ]; do sleep 0.2 & wait $!; step=$((step + 1)); done
  echo "finished at step $step"
`

func TestDevOnTheSimulatedCloudResumesAJobItsSpotTracePreempts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes for about half a minute")
	}
	t.Parallel()
	traces := filepath.Join(tracesDir(t), "preemption-aws-2023-04-22")
	const traceFile = "us-east-1c_v100_1.json"
	f, err := os.Open(filepath.Join(traces, traceFile))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := spot.DecodeTrace(f, traceFile)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Start the clock `up` ticks before the first tick where the trace
	// takes the instance away after holding it that long: time for gpuq
	// dev to boot the workers and for the job to start on the spot pool.
	const up = 24
	preemptAt := -1
	for z := up; z < len(tr.Avail) && preemptAt < 0; z++ {
		held := tr.Avail[z] == 0
		for k := z - up; k < z && held; k++ {
			held = tr.Avail[k] > 0
		}
		if held {
			preemptAt = z
		}
	}
	if preemptAt < 0 {
		t.Fatalf("trace %s never holds an instance for %d ticks before losing it", traceFile, up)
	}
	start := time.Duration(preemptAt-up)*tr.Gap + time.Second
	// 64 virtual seconds per real second: a 32 s tick lasts half a second.
	const speed = 64

	dir := t.TempDir()
	// The example config the README and its own header describe: a spot
	// pool on this trace and an on-demand pool beside it.
	config, err := filepath.Abs(filepath.Join("..", "..", "..", "examples", "sim.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bin := buildGpuq(t)
	// The simulation flags make a week of trace pass in minutes; --slots 1
	// keeps one job per worker on a small machine.
	args := append([]string{"dev", "--data-dir", filepath.Join(dir, "data"), "--config", config, "--slots", "1",
		"--provider", "sim", "--traces", traces, "--sim-speed", fmt.Sprint(speed), "--sim-start", start.String(), "-o", "json"},
		demoDatabaseArgs(t)...)
	dev := exec.Command(bin, args...)
	dev.Dir = dir
	var logs syncBuffer
	dev.Stderr = &logs
	stdout, err := dev.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dev.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
		done := make(chan struct{})
		go func() { dev.Wait(); close(done) }() //nolint:errcheck // stopping
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			dev.Process.Kill() //nolint:errcheck // stuck
			<-done
		}
		if t.Failed() {
			t.Logf("gpuq dev output:\n%s", logs.String())
		}
	})
	var conn struct {
		NATSURL     string `json:"nats_url"`
		DatabaseURL string `json:"database_url"`
		URL         string `json:"url"`
		Token       string `json:"token"`
	}
	if err := json.NewDecoder(stdout).Decode(&conn); err != nil {
		t.Fatalf("gpuq dev did not report its connection settings: %v", err)
	}
	checkDevHTTP(t, dir, conn.URL, conn.Token)
	// Client commands find dev's connection, its NATS credential included,
	// in the config file it writes where it runs.
	connArgs := []string{"--config", filepath.Join(dir, devConfigFile)}

	submitted, submitErr, err := runCLI(t, append([]string{"submit", "-f", writeFile(t, "job.yaml", simTrainSpec)}, connArgs...)...)
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, submitErr)
	}
	id := strings.TrimSpace(submitted)

	var st JobStatus
	var out, errOut string
	deadline := time.Now().Add(90 * time.Second)
	for {
		out, errOut, err = runCLI(t, append([]string{"status", id, "-o", "json"}, connArgs...)...)
		switch {
		case err != nil && strings.Contains(err.Error(), "not found"):
			// Submitted but not yet recorded by the scheduler.
		case err != nil:
			t.Fatalf("status: %v\n%s", err, errOut)
		default:
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatalf("status -o json: %v\n%s", err, out)
			}
		}
		if st.Job != nil && st.Job.State.Terminal() {
			break
		}
		if time.Now().After(deadline) {
			out, _, _ := runCLI(t, append([]string{"logs", id}, connArgs...)...)
			t.Logf("job logs:\n%s", out)
			t.Fatalf("job not finished after 90 s: %+v; attempts %+v", st.Job, st.Attempts)
		}
		time.Sleep(500 * time.Millisecond)
	}

	out, errOut, err = runCLI(t, append([]string{"logs", id}, connArgs...)...)
	if err != nil {
		t.Fatalf("logs: %v\n%s", err, errOut)
	}
	jobLogs := out
	if st.Job.State != queue.StateSucceeded {
		t.Fatalf("job ended %s, want succeeded; attempts %+v", st.Job.State, st.Attempts)
	}
	successes := 0
	for _, a := range st.Attempts {
		if a.Outcome == queue.OutcomeSucceeded {
			successes++
		}
	}
	if successes != 1 {
		t.Errorf("%d successful attempts, want exactly 1: %+v", successes, st.Attempts)
	}
	if len(st.Attempts) != 2 || st.Attempts[0].Pool != "v100-spot" || st.Attempts[0].Outcome != queue.OutcomePreempted ||
		st.Attempts[1].Pool != "v100" || st.Attempts[1].Outcome != queue.OutcomeSucceeded {
		t.Errorf("attempts = %+v, want one preempted on v100-spot, then one succeeded on v100", st.Attempts)
	}
	// The preemption came at the trace's tick, not before or after.
	preempted := regexp.MustCompile(`msg="sim: preempted" .*pool=v100-spot tick=(\d+)`).FindStringSubmatch(logs.String())
	if preempted == nil || preempted[1] != fmt.Sprint(preemptAt) {
		t.Errorf("sim preemption line %v, want one at tick %d", preempted, preemptAt)
	}

	out = jobLogs
	saved := regexp.MustCompile(`notice: saved step (\d+) as checkpoint (\d+)`).FindStringSubmatch(out)
	if saved == nil {
		t.Fatalf("the preempted attempt saved no final checkpoint on its notice:\n%s", out)
	}
	if want := fmt.Sprintf("attempt 2 on v100 resumed=1 from step %s final=yes", saved[1]); !strings.Contains(out, want) {
		t.Errorf("logs lack %q: the job did not resume from its final checkpoint:\n%s", want, out)
	}
	if !strings.Contains(out, "finished at step") {
		t.Errorf("the resumed attempt did not finish:\n%s", out)
	}

	// The pool history in PostgreSQL saw the launches, the placer's offer
	// refreshes and the preemption.
	out, errOut, err = runCLI(t, "pools", "--database-url", conn.DatabaseURL, "-o", "json")
	if err != nil {
		t.Fatalf("pools: %v\n%s", err, errOut)
	}
	var pools []PoolRow
	if err := json.Unmarshal([]byte(out), &pools); err != nil {
		t.Fatalf("pools -o json: %v\n%s", err, out)
	}
	var spotPool *PoolRow
	for i := range pools {
		if pools[i].Pool == "v100-spot" {
			spotPool = &pools[i]
		}
	}
	if spotPool == nil || spotPool.Launches < 1 || spotPool.Preemptions != 1 || spotPool.Ticks < 1 || spotPool.Price == nil {
		t.Errorf("pool history of v100-spot = %+v, want a launch, the one preemption, observations and a price (all: %s)", spotPool, out)
	}
}
