package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/pgtemp"
	"github.com/gpuq/gpuq/sql/pgtest"
)

// demoDatabaseArgs points the demo at GPUQ_TEST_DATABASE_URL (a fresh
// database in it) or lets it start its private cluster, skipping when there
// is no PostgreSQL at all, except in CI.
func demoDatabaseArgs(t *testing.T) []string {
	t.Helper()
	if os.Getenv("GPUQ_TEST_DATABASE_URL") != "" {
		return []string{"--database-url", pgtest.URL(t)}
	}
	if _, err := pgtemp.BinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL is required in CI: %v", err)
		}
		t.Skipf("no PostgreSQL for the demo (set GPUQ_TEST_DATABASE_URL or install the server): %v", err)
	}
	return nil
}

// buildGpuq builds the gpuq binary the demo starts its workers from.
func buildGpuq(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the demo needs the gpuq binary and building it needs the go tool: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "gpuq")
	out, err := exec.Command(goTool, "build", "-o", bin, "github.com/gpuq/gpuq/cmd/gpuq").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestDemoResumesTheKilledJobAndMeetsEveryExpectation(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo builds gpuq and runs worker processes for about 15 seconds")
	}
	t.Parallel()
	args := append([]string{"demo", "--executable", buildGpuq(t), "--data-dir", t.TempDir()}, demoDatabaseArgs(t)...)
	out, errOut, err := runCLI(t, args...)
	if err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	_, table, ok := strings.Cut(out, "\nJOB ")
	if !ok {
		t.Fatalf("no summary table:\n%s", out)
	}
	table, _, _ = strings.Cut(table, "\n\n")
	rows := map[string][]string{}
	for _, line := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(line)
		rows[f[0]] = f
	}
	want := map[string][]string{
		"hello": {"succeeded", "1", "0"},
		"train": {"succeeded", "2", "20"},
		"flaky": {"succeeded", "2", "0"},
		"eu":    {"succeeded", "1", "0"},
		"us":    {"rejected", "0", "0"},
	}
	for name, cells := range want {
		got := rows[name]
		if len(got) < 4 || strings.Join(got[1:4], " ") != strings.Join(cells, " ") {
			t.Errorf("summary row %s = %v, want state, attempts, checkpoints %v\n%s", name, got, cells, out)
		}
	}
	for _, s := range []string{
		"SIGKILL worker pid", "train | resumed=1 from step", "a1 lost, a2 succeeded (exit 0)",
		"a1 error (exit 3), a2 succeeded (exit 0)", "outside us-*", "every expectation held",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("demo output lacks %q:\n%s", s, out)
		}
	}
}

func TestDemoSpecsPassTheStrictParser(t *testing.T) {
	t.Parallel()
	for _, j := range demoJobs("run1") {
		spec, err := queue.ParseSpec([]byte(j.Spec))
		if err != nil {
			t.Errorf("%s: %v\n%s", j.Name, err, j.Spec)
			continue
		}
		if spec.Name != j.Name || spec.Project != demoProject || spec.IdempotencyKey != "run1-"+j.Name {
			t.Errorf("%s: name %q, project %q, key %q", j.Name, spec.Name, spec.Project, spec.IdempotencyKey)
		}
	}
}

// goodDemoReport is the outcome of a demo that kept every promise.
func goodDemoReport() *DemoReport {
	exit := func(c int) *int { return &c }
	r := &DemoReport{
		Jobs: []DemoJobResult{
			{Name: "hello", Want: queue.StateSucceeded, State: queue.StateSucceeded, Output: "hello.txt: hello",
				Attempts: []queue.Attempt{{Attempt: 1, Outcome: queue.OutcomeSucceeded, ExitCode: exit(0)}}},
			{Name: "train", Want: queue.StateSucceeded, State: queue.StateSucceeded,
				Attempts: []queue.Attempt{{Attempt: 1, Outcome: queue.OutcomeLost}, {Attempt: 2, Outcome: queue.OutcomeSucceeded, ExitCode: exit(0)}}},
			{Name: "flaky", Want: queue.StateSucceeded, State: queue.StateSucceeded,
				Attempts: []queue.Attempt{{Attempt: 1, Outcome: queue.OutcomeRetry, ExitCode: exit(3)}, {Attempt: 2, Outcome: queue.OutcomeSucceeded, ExitCode: exit(0)}}},
			{Name: "eu", Want: queue.StateSucceeded, State: queue.StateSucceeded, Residency: "EU", Countries: []string{"AT", "DE", "FR"},
				Attempts: []queue.Attempt{{Attempt: 1, Outcome: queue.OutcomeSucceeded, ExitCode: exit(0)}}},
			{Name: "us", Want: queue.StateRejected, State: queue.StateRejected, Reason: "no placement among 2 offers"},
		},
		Train: DemoTrain{LastSeqOfFirstAttempt: 4, StepInCheckpoint: 4, ResumedFromStep: 4},
	}
	for seq := 1; seq <= demoTrainSteps; seq++ {
		attempt := 1
		if seq > 4 {
			attempt = 2
		}
		r.Train.Checkpoints = append(r.Train.Checkpoints, DemoCheckpoint{Seq: seq, Attempt: attempt})
	}
	return r
}

func TestDemoCheckNamesEveryBrokenPromise(t *testing.T) {
	t.Parallel()
	good := goodDemoReport()
	if good.check(); len(good.Problems) > 0 {
		t.Fatalf("a good outcome has problems: %v", good.Problems)
	}
	job := func(r *DemoReport, name string) *DemoJobResult {
		for i := range r.Jobs {
			if r.Jobs[i].Name == name {
				return &r.Jobs[i]
			}
		}
		panic(name)
	}
	tests := []struct {
		name   string
		change func(*DemoReport)
		want   string
	}{
		{"hello failed", func(r *DemoReport) { job(r, "hello").State = queue.StateFailed }, "hello: ended failed, want succeeded"},
		{"hello stored no output", func(r *DemoReport) { job(r, "hello").Output = "" }, "hello: its output file was not stored"},
		{"train ran once", func(r *DemoReport) { job(r, "train").Attempts = job(r, "train").Attempts[1:] }, "train: 1 attempts, want 2"},
		{"train restarted from scratch", func(r *DemoReport) { r.Train.ResumedFromStep = 0 }, "train: resumed from step 0, want step 4"},
		{"train never resumed", func(r *DemoReport) { r.Train.ResumedFromStep = -1 }, "train: resumed from step -1"},
		{"checkpoint holds another step", func(r *DemoReport) { r.Train.StepInCheckpoint = 3 }, "which holds step 3"},
		{"killed before checkpoint 3", func(r *DemoReport) {
			r.Train.LastSeqOfFirstAttempt, r.Train.StepInCheckpoint, r.Train.ResumedFromStep = 2, 2, 2
		}, "train: the killed attempt committed up to checkpoint 2, want at least 3"},
		{"checkpoint sequence went back", func(r *DemoReport) { r.Train.Checkpoints[7].Seq = 3 }, "train: checkpoint sequence went back at 3"},
		{"a checkpoint is missing", func(r *DemoReport) { r.Train.Checkpoints = r.Train.Checkpoints[:19] }, "train: 19 checkpoints, want one per step (20)"},
		{"flaky never failed", func(r *DemoReport) { job(r, "flaky").Attempts = job(r, "flaky").Attempts[1:] }, "flaky: want a first attempt that exited 3"},
		{"eu placed without residency", func(r *DemoReport) { job(r, "eu").Residency = "" }, `eu: placed under residency ""`},
		{"us ran", func(r *DemoReport) { job(r, "us").State = queue.StateSucceeded }, "us: ended succeeded, want rejected"},
		{"us rejected silently", func(r *DemoReport) { job(r, "us").Reason = "" }, "us: rejected without a reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := goodDemoReport()
			tt.change(r)
			r.check()
			if len(r.Problems) != 1 || !strings.Contains(r.Problems[0], tt.want) {
				t.Errorf("problems = %q, want one containing %q", r.Problems, tt.want)
			}
		})
	}
}
