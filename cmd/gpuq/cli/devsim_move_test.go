package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/policy/spot"
	"github.com/gpuq/gpuq/queue"
)

// A spot-then-on-demand job with a deadline starts on zone c's spot; c's
// trace goes dark while zone f's has capacity, so the re-placement (the
// spot strategy advising spot, with the pools' history that a first run of
// gpuq dev recorded in PostgreSQL before it was restarted) moves it to f's
// spot rather than to on-demand, and it meets its deadline. The name is
// short: the private cluster's socket path under t.TempDir must
// stay within 107 bytes.
func TestDevSimMovesADeadlineJobToTheOtherZonesSpot(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev twice with worker processes, for about a minute")
	}
	t.Parallel()
	traces := filepath.Join(tracesDir(t), "preemption-aws-2023-04-22")
	load := func(name string) spot.Trace {
		f, err := os.Open(filepath.Join(traces, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		tr, err := spot.DecodeTrace(f, name)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	c, f := load("us-east-1c_v100_1.json"), load("us-east-1f_v100_1.json")
	// The first tick where c goes dark after holding for `up` ticks while f
	// holds from then until `after` ticks later.
	const up, after = 24, 120
	darkAt := -1
	for z := up; z+after < len(c.Avail) && darkAt < 0; z++ {
		ok := c.Avail[z] == 0
		for k := z - up; k < z+after && ok; k++ {
			ok = f.Avail[k] > 0 && (k >= z || c.Avail[k] > 0)
		}
		if ok {
			darkAt = z
		}
	}
	if darkAt < 0 {
		t.Fatal("no tick where us-east-1c goes dark while us-east-1f holds")
	}
	start := time.Duration(darkAt-up)*c.Gap + time.Second
	const speed = 64 // a 32 s tick lasts half a second

	dir := t.TempDir()
	// Zone c's spot is the cheaper, so the job starts there. The restart
	// overhead is seconds, as the job's checkpoints are.
	config := writeFile(t, "sim.yaml", `sim:
  pools:
    - {pool: v100-spot-c, region: us-east-1c, country: US, card: V100, gpu_count: 1, gpu_memory_gb: 16, vcpu: 8, memory_gb: 61,
       tier: spot, price_per_hour: "0.90", currency: USD, trace: us-east-1c_v100_1.json, grace: 10s}
    - {pool: v100-spot-f, region: us-east-1f, country: US, card: V100, gpu_count: 1, gpu_memory_gb: 16, vcpu: 8, memory_gb: 61,
       tier: spot, price_per_hour: "0.95", currency: USD, trace: us-east-1f_v100_1.json, grace: 10s}
    - {pool: v100, region: us-east-1c, country: US, card: V100, gpu_count: 1, gpu_memory_gb: 16, vcpu: 8, memory_gb: 61,
       tier: on-demand, price_per_hour: "3.06", currency: USD}
policy:
  exchange_rates: {USD: 0.92}
  spot: {restart_overhead: 5s}
`)
	bin := buildGpuq(t)
	data, dbArgs := filepath.Join(dir, "data"), demoDatabaseArgs(t)
	// gpuq dev runs twice on the same data directory (its NATS and
	// PostgreSQL state): a first run places a short job, which records the
	// pools' availability, and stops; the restarted one runs the deadline
	// job with the history the first run recorded.
	var before PoolRow
	startSimDev(t, bin, data, config, traces, start, speed, dbArgs, func(connArgs []string) {
		warmup := "name: warmup\nresources: {gpu: {count: 1, cards: [V100]}}\nplacement: {tier: spot}\ncommand: [\"true\"]\n"
		if st := runSimJob(t, warmup, connArgs); st.Job.State != queue.StateSucceeded {
			t.Fatalf("the first run's job ended %s: %+v", st.Job.State, st.Attempts)
		}
		before = simPool(t, connArgs, "v100-spot-c")
	})
	connArgs := startSimDev(t, bin, data, config, traces, start, speed, dbArgs, nil)

	deadline := time.Now().Add(3 * time.Minute).UTC().Truncate(time.Second)
	spec := simTrainSpec + "expected_duration: 20s\ndeadline: " + deadline.Format(time.RFC3339) + "\n"
	st := runSimJob(t, spec, connArgs)
	if st.Job.State != queue.StateSucceeded || st.Job.FinalizedAt == nil || st.Job.FinalizedAt.After(deadline) {
		t.Fatalf("job ended %s at %v, want succeeded by its deadline %v; attempts %+v", st.Job.State, st.Job.FinalizedAt, deadline, st.Attempts)
	}
	if len(st.Attempts) != 2 || st.Attempts[0].Pool != "v100-spot-c" || st.Attempts[0].Outcome != queue.OutcomePreempted ||
		st.Attempts[1].Pool != "v100-spot-f" || st.Attempts[1].Outcome != queue.OutcomeSucceeded {
		t.Errorf("attempts = %+v, want one preempted on v100-spot-c, then one succeeded on v100-spot-f (not on-demand v100)", st.Attempts)
	}
	if !strings.Contains(string(st.Placement), "spot strategy gpuq-lookahead advises spot") {
		t.Errorf("the re-placement's decision lacks the strategy's advice to stay on spot: %s", st.Placement)
	}
	later := simPool(t, connArgs, "v100-spot-c")
	if before.Ticks < 1 || before.Launches < 1 || later.Ticks <= before.Ticks || later.Launches <= before.Launches || later.Preemptions < 1 {
		t.Errorf("v100-spot-c's history: %+v after the first run, %+v after the second; want the second to add to the first's", before, later)
	}
}

// startSimDev runs gpuq dev on the simulated cloud as the README starts it
// (the simulation flags make the traces pass in seconds; --slots 1 keeps one
// job per worker on a small machine). With then, it calls then with the
// connection arguments and stops dev; without, dev runs until the test ends.
// It returns the connection arguments.
func startSimDev(t *testing.T, bin, data, config, traces string, start time.Duration, speed int, dbArgs []string, then func([]string)) []string {
	t.Helper()
	args := append([]string{"dev", "--data-dir", data, "--config", config, "--slots", "1",
		"--provider", "sim", "--traces", traces, "--sim-speed", fmt.Sprint(speed), "--sim-start", start.String(), "-o", "json"},
		dbArgs...)
	dev := exec.Command(bin, args...)
	dev.Dir = filepath.Dir(data)
	var logs syncBuffer
	dev.Stderr = &logs
	stdout, err := dev.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	stop := func() {
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
	}
	var conn struct {
		NATSURL     string `json:"nats_url"`
		DatabaseURL string `json:"database_url"`
	}
	if err := json.NewDecoder(stdout).Decode(&conn); err != nil {
		stop()
		t.Fatalf("gpuq dev did not report its connection settings: %v; its output:\n%s", err, logs.String())
	}
	// Client commands find dev's connection, its NATS credential included,
	// in the config file it writes where it runs.
	connArgs := []string{"--config", filepath.Join(dev.Dir, devConfigFile)}
	if then == nil {
		t.Cleanup(stop)
		return connArgs
	}
	defer stop()
	then(connArgs)
	return connArgs
}

// runSimJob submits spec and waits up to 90 s for the job to finish.
func runSimJob(t *testing.T, spec string, connArgs []string) JobStatus {
	t.Helper()
	submitted, submitErr, err := runCLI(t, append([]string{"submit", "-f", writeFile(t, "job.yaml", spec)}, connArgs[:2]...)...)
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, submitErr)
	}
	id := strings.TrimSpace(submitted)
	var st JobStatus
	for wait := time.Now().Add(90 * time.Second); ; {
		out, errOut, err := runCLI(t, append([]string{"status", id, "-o", "json"}, connArgs[:2]...)...)
		switch {
		case err != nil && strings.Contains(err.Error(), "not found"):
		case err != nil:
			t.Fatalf("status: %v\n%s", err, errOut)
		default:
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatalf("status -o json: %v\n%s", err, out)
			}
		}
		if st.Job != nil && st.Job.State.Terminal() {
			return st
		}
		if time.Now().After(wait) {
			t.Fatalf("job not finished after 90 s: %+v; attempts %+v", st.Job, st.Attempts)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// simPool reads one pool's recorded history with gpuq pools.
func simPool(t *testing.T, connArgs []string, pool string) PoolRow {
	t.Helper()
	out, errOut, err := runCLI(t, append([]string{"pools", "--pool", pool, "-o", "json"}, connArgs...)...)
	if err != nil {
		t.Fatalf("pools: %v\n%s", err, errOut)
	}
	var rows []PoolRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("pools -o json: %v, %d rows\n%s", err, len(rows), out)
	}
	return rows[0]
}
