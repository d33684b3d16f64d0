package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeTrace(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(`{"metadata": {"gap_seconds": 600}, "data": [`+data+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSimulatePrintsEveryStrategyAgainstTheOptimum(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := writeTrace(t, dir, "a.json", "1,1,1,0,0,0,1,1,1,1,1,1")
	b := writeTrace(t, dir, "b.json", "0,0,1,1,1,0,0,0,1,1,1,1")
	out, _, err := runCLI(t, "simulate", "--trace", a+","+b, "--compute-hours", "1",
		"--deadline-hours", "2", "--restart-overhead-hours", "0.05")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"on-demand ", "spot-only", "greedy", "uniform-progress", "gpuq", "optimum", "100.0%"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestSimulateJSONGivesCostsInMicros(t *testing.T) {
	t.Parallel()
	a := writeTrace(t, t.TempDir(), "a.json", "0,0,0,0,0,0,0,0,0,0,0,0")
	out, _, err := runCLI(t, "simulate", "--trace", a, "--compute-hours", "1", "--deadline-hours", "2",
		"--restart-overhead-hours", "0", "--strategy", "greedy", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Optimum struct {
			CostMicros int64 `json:"cost_micros"`
		} `json:"optimum"`
		Strategies []struct {
			Strategy    string `json:"strategy"`
			CostMicros  int64  `json:"cost_micros"`
			DeadlineMet bool   `json:"deadline_met"`
		} `json:"strategies"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	// No spot at all: one hour on on-demand at 3.06 USD/h, for greedy and the optimum.
	if len(got.Strategies) != 1 || got.Strategies[0].Strategy != "greedy" || got.Strategies[0].CostMicros != 3_060_000 ||
		!got.Strategies[0].DeadlineMet || got.Optimum.CostMicros != 3_060_000 {
		t.Errorf("got %+v", got)
	}
}

func TestSimulateSweepReportsMeanAndP90WithProgress(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeTrace(t, dir, "x_v100_1.json", strings.Repeat("1,1,0,", 40)+"1")
	writeTrace(t, dir, "x_k80_1.json", strings.Repeat("0,", 120)+"0")
	out, errOut, err := runCLI(t, "simulate", "--sweep", "--trace-dir", dir, "--sweep-compute-hours", "2,4",
		"--sweep-slack", "0.5", "--sweep-overhead-hours", "0.05", "--sweep-start-step-hours", "3")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pools x_v100_1\n", "| gpuq |", "mean gap to optimum", "## all"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "sweep: ") {
		t.Errorf("no progress on stderr: %q", errOut)
	}
}

func TestSimulateErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	a := writeTrace(t, t.TempDir(), "a.json", "1,1,1")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no trace", []string{"--compute-hours", "1", "--deadline-hours", "1"}, "--trace"},
		{"no compute", []string{"--trace", a, "--deadline-hours", "1"}, "--compute-hours"},
		{"bad price", []string{"--trace", a, "--compute-hours", "0.1", "--deadline-hours", "0.5", "--od-price", "3,06"}, "--od-price"},
		{"unknown strategy", []string{"--trace", a, "--compute-hours", "0.1", "--deadline-hours", "0.5", "--strategy", "lucky"}, "--strategy"},
		{"deadline past the trace", []string{"--trace", a, "--compute-hours", "0.1", "--deadline-hours", "5"}, "job.deadline"},
		{"missing file", []string{"--trace", a + ".nope", "--compute-hours", "0.1", "--deadline-hours", "0.5"}, "--trace"},
		{"one pool to compare", []string{"--pools", a, "--compute-hours", "0.1", "--deadline-hours", "0.5"}, "--pools"},
		{"pools and traces", []string{"--pools", a + "," + a, "--trace", a, "--compute-hours", "0.1", "--deadline-hours", "0.5"}, "--pools"},
		{"move without pools", []string{"--trace", a, "--compute-hours", "0.1", "--deadline-hours", "0.5", "--move-cost", "1"}, "--move-cost"},
		{"cards without a sweep", []string{"--pools-by-card", filepath.Dir(a), "--compute-hours", "0.1", "--deadline-hours", "0.5"}, "--pools-by-card"},
		{"cards and pools", []string{"--sweep", "--pools-by-card", filepath.Dir(a), "--pools", a + "," + a}, "--pools-by-card"},
		{"no card in two zones", []string{"--sweep", "--pools-by-card", filepath.Dir(a)}, "--pools-by-card"},
		{"negative transfer", []string{"--pools", a + "," + a, "--compute-hours", "0.1", "--deadline-hours", "0.5", "--move-hours", "-1"}, "--move-hours"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := runCLI(t, append([]string{"simulate"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestSimulatePoolsPlaysEachPoolAloneAndAllPoolsWithMoves(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Zone a has spot for the first hour, zone b for the second: on all
	// pools the job moves once, paying the 0.10 USD egress.
	a := writeTrace(t, dir, "a.json", "1,1,1,1,1,1,0,0,0,0,0,0,0,0,0")
	b := writeTrace(t, dir, "b.json", "0,0,0,0,0,0,1,1,1,1,1,1,1,1,1")
	out, _, err := runCLI(t, "simulate", "--pools", a+","+b, "--compute-hours", "1.5", "--deadline-hours", "2.5",
		"--restart-overhead-hours", "0.05", "--move-cost", "0.10", "--move-hours", "0.05", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Pools  []string `json:"pools"`
		Single [][]struct {
			Strategy string `json:"strategy"`
		} `json:"single"`
		Multi []struct {
			Strategy    string `json:"strategy"`
			DeadlineMet bool   `json:"deadline_met"`
			Moves       int    `json:"moves"`
		} `json:"multi"`
		SingleOptimum []struct {
			CostMicros int64 `json:"cost_micros"`
		} `json:"single_optimum"`
		Optimum struct {
			CostMicros int64 `json:"cost_micros"`
		} `json:"optimum"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if len(got.Pools) != 2 || len(got.Single) != 2 || len(got.Single[0]) != 4 || len(got.Multi) != 4 {
		t.Fatalf("want greedy, uniform-progress, gpuq and gpuq-lookahead on each pool and on both, got %s", out)
	}
	for _, o := range got.Multi {
		if !o.DeadlineMet || o.Moves != 1 {
			t.Errorf("%s on all pools: met %v with %d moves, want met with one move", o.Strategy, o.DeadlineMet, o.Moves)
		}
	}
	for i, opt := range got.SingleOptimum {
		if got.Optimum.CostMicros >= opt.CostMicros {
			t.Errorf("all-pools optimum %d micros, not under pool %s's %d", got.Optimum.CostMicros, got.Pools[i], opt.CostMicros)
		}
	}
	table, _, err := runCLI(t, "simulate", "--pools", a+","+b, "--compute-hours", "1.5", "--deadline-hours", "2.5",
		"--restart-overhead-hours", "0.05", "--move-cost", "0.10", "--move-hours", "0.05")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"GAP TO ALL-POOLS OPTIMUM", "all pools", "uniform-progress", "optimum"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	report, _, err := runCLI(t, "simulate", "--sweep", "--pools", a+","+b, "--sweep-compute-hours", "1", "--sweep-slack", "0.5",
		"--sweep-overhead-hours", "0.05", "--sweep-start-step-hours", "0.5", "--move-cost", "0.10", "--move-hours", "0.05")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| a | gpuq |", "| each pool alone | uniform-progress |", "| best pool alone | optimum |", "| all pools | gpuq |", "0.10 USD of egress"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
}

func TestSimulatePoolsByCardComparesEveryCardFoundInTwoZones(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeTrace(t, dir, "za_v100_1.json", strings.Repeat("1,1,0,", 40)+"1")
	writeTrace(t, dir, "zb_v100_1.json", strings.Repeat("0,1,1,", 40)+"1")
	writeTrace(t, dir, "za_k80_1.json", strings.Repeat("1,0,", 60)+"1")
	out, _, err := runCLI(t, "simulate", "--sweep", "--pools-by-card", dir, "--move-cost", "0.10", "--move-hours", "0.05",
		"--sweep-compute-hours", "2", "--sweep-slack", "0.5", "--sweep-overhead-hours", "0.05", "--sweep-start-step-hours", "3", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Scenarios map[string][]string `json:"scenarios"`
		Rows      []struct {
			Scenario string `json:"scenario"`
			Pools    string `json:"pools"`
			Strategy string `json:"strategy"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	// k80_1 has one zone only: nothing to compare.
	if len(got.Scenarios) != 1 || strings.Join(got.Scenarios["v100_1"], ",") != "za_v100_1,zb_v100_1" {
		t.Fatalf("scenarios = %v, want v100_1 alone with both zones", got.Scenarios)
	}
	seen := map[string]bool{}
	for _, r := range got.Rows {
		seen[r.Scenario+"/"+r.Pools+"/"+r.Strategy] = true
	}
	for _, want := range []string{"v100_1/za_v100_1/gpuq", "v100_1/all pools/optimum", "all/all pools/gpuq", "all/best pool alone/optimum"} {
		if !seen[want] {
			t.Errorf("no row %s in %v", want, seen)
		}
	}
}
