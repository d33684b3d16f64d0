package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpuq/gpuq/policy/spot"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

func newSimulateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Replay spot availability traces and compare deadline-aware spot strategies",
		Long: `simulate replays spot availability traces, one file per spot pool the job may
use, and prints for each strategy the cost, the cost as a share of on-demand
only, whether the deadline was met, preemptions, switches and the gap to the
offline optimum. A trace is JSON {"metadata": {"gap_seconds": G}, "data": [n0,
n1, ...]}: n is the number of spot instances that could be held during that
tick of G seconds (0: none, and a held instance is preempted).

--sweep replays a grid of compute hours × slack × restart overhead × start
offsets and prints mean and p90 per strategy, as a markdown report.

--pools FILE,FILE… compares pools: the same card in several zones of one
region set. It plays the job on each pool alone (greedy, Uniform Progress and
gpuq, each against that pool's optimum) and on all of them, where a spot
start outside the zone holding the checkpoint costs --move-cost (egress of
the checkpoint) and --move-hours (transfer time, lost like the restart
overhead): Uniform Progress falling back to the other pools, gpuq across
pools, and the optimum over all pools, the lower bound every row is also
measured against. --pools-by-card DIR (with --sweep) makes the same
comparison for every card of a folder of traces named ZONE_CARD.json that has
two zones or more, one table per card, then one over every card's jobs.`,
		Args: cobra.NoArgs,
		RunE: runSimulate,
	}
	f := cmd.Flags()
	f.StringSlice("trace", nil, "trace files, one per spot pool (FILE[,FILE…])")
	f.StringSlice("trace-dir", nil, "with --sweep: folders of traces, each one scenario whose pools are the files matching --pool-glob")
	f.String("pool-glob", "*_v100_1.json", "with --trace-dir: glob selecting a folder's files that form the job's pools")
	f.StringSlice("pools", nil, "trace files of the pools to compare, one zone each (FILE,FILE[,FILE…]); replaces --trace")
	f.String("pools-by-card", "", "with --sweep: folder of traces named ZONE_CARD.json; compare the pools of every card found in two zones or more")
	f.String("move-cost", "0", "with --pools: egress of the checkpoint per move between zones")
	f.Float64("move-hours", 0, "with --pools: transfer time of the checkpoint per move between zones")
	f.Float64("compute-hours", 0, "hours of compute the job needs (C)")
	f.Float64("deadline-hours", 0, "hours from the start by which the job must be done (D)")
	f.Float64("restart-overhead-hours", 0.2, "progress lost at each (re)start on a new instance (d)")
	f.Float64("start-hours", 0, "offset into the traces at which the job starts")
	f.String("od-price", "3.06", "on-demand price per hour")
	f.String("spot-price", "0.92", "spot price per hour")
	f.String("currency", "USD", "currency of the prices")
	f.String("strategy", "all", "strategy to run, or all")
	f.Bool("keep-on-demand", false, "keep on-demand to the end once a strategy takes it, as a scheduler that never moves a running job back to spot would")
	f.Bool("sweep", false, "run the grid below instead of one job")
	floatList(f, "sweep-compute-hours", []float64{24, 48}, "with --sweep: compute `hours`, comma-separated")
	floatList(f, "sweep-slack", []float64{0.1, 0.3, 0.5}, "with --sweep: slack as a `share` of compute, comma-separated")
	floatList(f, "sweep-overhead-hours", []float64{0.05, 0.2}, "with --sweep: restart overheads in `hours`, comma-separated")
	f.Float64("sweep-start-step-hours", 6, "with --sweep: hours between start offsets")
	f.Float64("sweep-start-offset-hours", 0, "with --sweep: hours into the traces of the first start (shift it for held-out jobs)")
	f.Int("workers", runtime.NumCPU(), "with --sweep: jobs simulated in parallel")
	return cmd
}

// floatList defines a list-of-numbers flag whose help shows its default as it
// would be typed (24,48), not as pflag prints it ([24.000000,48.000000]).
func floatList(f *pflag.FlagSet, name string, def []float64, usage string) {
	f.Float64Slice(name, def, usage)
	shown := make([]string, len(def))
	for i, v := range def {
		shown[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	f.Lookup(name).DefValue = strings.Join(shown, ",")
}

// simulateConfig is what simulate reads from flags, environment and file.
type simulateConfig struct {
	Traces     []string
	TraceDirs  []string
	PoolGlob   string
	Pools      []string // pool comparison mode
	PoolDir    string   // pool comparison mode, every card of the folder
	Move       spot.Move
	Compute    time.Duration
	Deadline   time.Duration
	Overhead   time.Duration
	Start      time.Duration
	Prices     spot.Prices
	Strategies []spot.Strategy
	Sweep      bool
	Grid       spot.Grid
	Workers    int
	Output     string
}

// comparesPools reports whether simulate compares pools (each alone, then
// all of them with moves) rather than playing every pool as one job's.
func (c simulateConfig) comparesPools() bool { return len(c.Pools) > 0 || c.PoolDir != "" }

func hours(h float64) time.Duration { return time.Duration(h * float64(time.Hour)) }

func readSimulateConfig(v *viper.Viper) (simulateConfig, error) {
	var c simulateConfig
	var err error
	if c.Output, err = outputFormat(v); err != nil {
		return c, err
	}
	c.Traces = v.GetStringSlice("trace")
	c.TraceDirs = v.GetStringSlice("trace-dir")
	c.PoolGlob = v.GetString("pool-glob")
	c.Pools = v.GetStringSlice("pools")
	c.PoolDir = v.GetString("pools-by-card")
	c.Compute = hours(v.GetFloat64("compute-hours"))
	c.Deadline = hours(v.GetFloat64("deadline-hours"))
	c.Overhead = hours(v.GetFloat64("restart-overhead-hours"))
	c.Start = hours(v.GetFloat64("start-hours"))
	c.Sweep = v.GetBool("sweep")
	c.Workers = v.GetInt("workers")
	c.Prices.Currency = v.GetString("currency")
	if c.Prices.OnDemand, err = parseMicros(v.GetString("od-price")); err != nil {
		return c, fmt.Errorf("--od-price: %w", err)
	}
	if c.Prices.Spot, err = parseMicros(v.GetString("spot-price")); err != nil {
		return c, fmt.Errorf("--spot-price: %w", err)
	}
	if c.Move.Micros, err = parseMicros(v.GetString("move-cost")); err != nil {
		return c, fmt.Errorf("--move-cost: %w", err)
	}
	if h := v.GetFloat64("move-hours"); h < 0 {
		return c, fmt.Errorf("--move-hours: must be ≥ 0, got %v", h)
	} else {
		c.Move.Time = hours(h)
	}
	if len(c.Pools) > 0 {
		switch {
		case len(c.Pools) < 2:
			return c, fmt.Errorf("--pools: give at least two trace files, got %d", len(c.Pools))
		case len(c.Traces) > 0 || len(c.TraceDirs) > 0:
			return c, fmt.Errorf("--pools: use it instead of --trace and --trace-dir, not with them")
		}
		c.Traces = c.Pools
	}
	if c.PoolDir != "" {
		switch {
		case !c.Sweep:
			return c, fmt.Errorf("--pools-by-card: only with --sweep; use --pools for one job")
		case len(c.Traces) > 0 || len(c.TraceDirs) > 0:
			return c, fmt.Errorf("--pools-by-card: use it instead of --pools, --trace and --trace-dir, not with them")
		}
	}
	if !c.comparesPools() && c.Move != (spot.Move{}) {
		return c, fmt.Errorf("--move-cost, --move-hours: only with --pools or --pools-by-card")
	}
	if name := v.GetString("strategy"); name == "all" {
		c.Strategies = spot.Strategies()
		if c.comparesPools() {
			c.Strategies = poolStrategies()
		}
	} else {
		st, err := spot.ByName(name)
		if err != nil {
			return c, fmt.Errorf("--strategy: %w", err)
		}
		c.Strategies = []spot.Strategy{st}
	}
	if v.GetBool("keep-on-demand") {
		for i, st := range c.Strategies {
			c.Strategies[i] = spot.KeepOnDemand{Strategy: st}
		}
	}
	if len(c.Traces) == 0 && (!c.Sweep || len(c.TraceDirs) == 0 && c.PoolDir == "") {
		return c, fmt.Errorf("--trace: give at least one trace file (or --sweep with --trace-dir)")
	}
	if !c.Sweep {
		if len(c.TraceDirs) > 0 {
			return c, fmt.Errorf("--trace-dir: only with --sweep; use --trace for one job")
		}
		if c.Compute <= 0 {
			return c, fmt.Errorf("--compute-hours: must be > 0, got %v", v.GetFloat64("compute-hours"))
		}
		if c.Deadline <= 0 {
			return c, fmt.Errorf("--deadline-hours: must be > 0, got %v", v.GetFloat64("deadline-hours"))
		}
		return c, nil
	}
	for _, h := range v.GetStringSlice("sweep-compute-hours") {
		x, err := strconv.ParseFloat(strings.Trim(h, "[]"), 64)
		if err != nil || x <= 0 {
			return c, fmt.Errorf("--sweep-compute-hours: want positive hours, got %q", h)
		}
		c.Grid.Computes = append(c.Grid.Computes, hours(x))
	}
	for _, s := range v.GetStringSlice("sweep-slack") {
		x, err := strconv.ParseFloat(strings.Trim(s, "[]"), 64)
		if err != nil || x < 0 {
			return c, fmt.Errorf("--sweep-slack: want shares ≥ 0, got %q", s)
		}
		c.Grid.Slacks = append(c.Grid.Slacks, x)
	}
	for _, h := range v.GetStringSlice("sweep-overhead-hours") {
		x, err := strconv.ParseFloat(strings.Trim(h, "[]"), 64)
		if err != nil || x < 0 {
			return c, fmt.Errorf("--sweep-overhead-hours: want hours ≥ 0, got %q", h)
		}
		c.Grid.Overheads = append(c.Grid.Overheads, hours(x))
	}
	if c.Grid.StartStep = hours(v.GetFloat64("sweep-start-step-hours")); c.Grid.StartStep <= 0 {
		return c, fmt.Errorf("--sweep-start-step-hours: must be > 0, got %v", v.GetFloat64("sweep-start-step-hours"))
	}
	if c.Grid.StartOffset = hours(v.GetFloat64("sweep-start-offset-hours")); c.Grid.StartOffset < 0 {
		return c, fmt.Errorf("--sweep-start-offset-hours: must be ≥ 0, got %v", v.GetFloat64("sweep-start-offset-hours"))
	}
	return c, nil
}

// parseMicros reads a decimal amount such as "3.06" into micros without
// going through floating point.
func parseMicros(s string) (int64, error) {
	whole, frac, _ := strings.Cut(strings.TrimSpace(s), ".")
	if len(frac) > 6 {
		return 0, fmt.Errorf("want at most 6 decimals, got %q", s)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w < 0 || w > 1e9 {
		return 0, fmt.Errorf("want a non-negative amount such as 3.06, got %q", s)
	}
	f := int64(0)
	if frac != "" {
		if f, err = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64); err != nil {
			return 0, fmt.Errorf("want a non-negative amount such as 3.06, got %q", s)
		}
	}
	return w*1_000_000 + f, nil
}

func formatMicros(m int64) string { return fmt.Sprintf("%d.%02d", m/1_000_000, m%1_000_000/10_000) }

func loadTraces(paths []string) ([]spot.Trace, error) {
	var out []spot.Trace
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("--trace: %w", err)
		}
		tr, err := spot.DecodeTrace(f, strings.TrimSuffix(filepath.Base(p), ".json"))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("--trace: %s: %w", p, err)
		}
		out = append(out, tr)
	}
	return out, nil
}

func runSimulate(cmd *cobra.Command, _ []string) error {
	v, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	c, err := readSimulateConfig(v)
	if err != nil {
		return err
	}
	if c.Sweep {
		return runSweep(cmd, c)
	}
	traces, err := loadTraces(c.Traces)
	if err != nil {
		return err
	}
	job := spot.Job{Compute: c.Compute, Deadline: c.Deadline, Overhead: c.Overhead, Start: c.Start, Move: c.Move}
	if len(c.Pools) > 0 {
		return comparePools(cmd, c, traces, job)
	}
	cmp, err := spot.Compare(traces, job, c.Prices, c.Strategies)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if c.Output == "json" {
		return writeJSON(w, cmp)
	}
	t := newTable(w, "STRATEGY", "COST "+c.Prices.Currency, "% OF ON-DEMAND", "DEADLINE MET", "PREEMPTIONS", "SWITCHES", "GAP TO OPTIMUM")
	for _, o := range cmp.Outcomes {
		t.row(o.Strategy, formatMicros(o.CostMicros), fmt.Sprintf("%.1f%%", o.CostPct), o.DeadlineMet,
			o.Preemptions, o.Switches, fmt.Sprintf("%.1f%%", o.GapPct))
	}
	t.row("optimum", formatMicros(cmp.Optimum.CostMicros), "", cmp.Optimum.DeadlineMet, "", "", "0.0%")
	return t.flush()
}

func runSweep(cmd *cobra.Command, c simulateConfig) error {
	var scenarios []spot.Scenario
	if len(c.Traces) > 0 {
		traces, err := loadTraces(c.Traces)
		if err != nil {
			return err
		}
		scenarios = append(scenarios, spot.Scenario{Name: "traces", Traces: traces})
	}
	for _, dir := range c.TraceDirs {
		paths, err := filepath.Glob(filepath.Join(dir, c.PoolGlob))
		if err != nil {
			return fmt.Errorf("--pool-glob: %w", err)
		}
		if len(paths) == 0 {
			return fmt.Errorf("--trace-dir: no file in %s matches --pool-glob %q", dir, c.PoolGlob)
		}
		sort.Strings(paths)
		traces, err := loadTraces(paths)
		if err != nil {
			return err
		}
		scenarios = append(scenarios, spot.Scenario{Name: filepath.Base(filepath.Clean(dir)), Traces: traces})
	}
	if c.PoolDir != "" {
		cards, err := cardScenarios(c.PoolDir)
		if err != nil {
			return err
		}
		scenarios = cards
	}
	stderr := cmd.ErrOrStderr()
	progress := func(done, total int) {
		if done%50 == 0 || done == total {
			fmt.Fprintf(stderr, "\rsweep: %d/%d jobs", done, total)
		}
		if done == total {
			fmt.Fprintln(stderr)
		}
	}
	var rows []spot.Summary
	var err error
	if c.comparesPools() {
		if len(c.Pools) > 0 {
			scenarios[0].Name = filepath.Base(filepath.Dir(c.Pools[0]))
		}
		c.Grid.Move = c.Move
		rows, err = spot.SweepPools(scenarios, c.Grid, c.Prices, c.Strategies, c.Strategies, c.Workers, progress)
	} else {
		rows, err = spot.Sweep(scenarios, c.Grid, c.Prices, c.Strategies, c.Workers, progress)
	}
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if c.Output == "json" {
		return writeJSON(w, map[string]any{"scenarios": scenarioPools(scenarios), "rows": rows})
	}
	return writeSweepReport(w, c, scenarios, rows)
}

// cardScenarios reads a folder of traces named ZONE_CARD.json into one
// scenario per card found in two zones or more, named after the card, its
// pools the card's zones in name order.
func cardScenarios(dir string) ([]spot.Scenario, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*_*.json"))
	if err != nil {
		return nil, fmt.Errorf("--pools-by-card: %w", err)
	}
	sort.Strings(paths)
	byCard := map[string][]string{}
	var cards []string
	for _, p := range paths {
		_, card, _ := strings.Cut(strings.TrimSuffix(filepath.Base(p), ".json"), "_")
		if byCard[card] == nil {
			cards = append(cards, card)
		}
		byCard[card] = append(byCard[card], p)
	}
	sort.Strings(cards)
	var out []spot.Scenario
	for _, card := range cards {
		if len(byCard[card]) < 2 {
			continue
		}
		traces, err := loadTraces(byCard[card])
		if err != nil {
			return nil, err
		}
		out = append(out, spot.Scenario{Name: card, Traces: traces})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--pools-by-card: no card in %s has traces of two zones (files named ZONE_CARD.json)", dir)
	}
	return out, nil
}

func scenarioPools(scenarios []spot.Scenario) map[string][]string {
	out := make(map[string][]string, len(scenarios))
	for _, sc := range scenarios {
		for _, tr := range sc.Traces {
			out[sc.Name] = append(out[sc.Name], tr.Name)
		}
	}
	return out
}

// writeSweepReport prints the sweep as markdown, one table per scenario and
// one for all of them.
func writeSweepReport(w io.Writer, c simulateConfig, scenarios []spot.Scenario, rows []spot.Summary) error {
	fmt.Fprintf(w, "# gpuq simulate --sweep\n\n")
	fmt.Fprintf(w, "Grid: compute %v h, slack %v of compute, restart overhead %v h, a start every %v h from %v h; on-demand %s %s/h, spot %s %s/h.\n\n",
		hoursList(c.Grid.Computes), c.Grid.Slacks, hoursList(c.Grid.Overheads), c.Grid.StartStep.Hours(), c.Grid.StartOffset.Hours(),
		formatMicros(c.Prices.OnDemand), c.Prices.Currency, formatMicros(c.Prices.Spot), c.Prices.Currency)
	if c.comparesPools() {
		fmt.Fprintf(w, "A move between zones costs %s %s of egress and %v h of transfer on top of the restart overhead. "+
			"Gap: to the optimum over the pools the row may use; last column: to the optimum over all pools with moves.\n\n",
			formatMicros(c.Move.Micros), c.Prices.Currency, c.Move.Time.Hours())
	}
	for _, sc := range scenarios {
		names := make([]string, len(sc.Traces))
		for i, tr := range sc.Traces {
			names[i] = tr.Name
		}
		fmt.Fprintf(w, "- `%s`: pools %s\n", sc.Name, strings.Join(names, ", "))
	}
	scenario := ""
	for _, r := range rows {
		if r.Scenario != scenario {
			scenario = r.Scenario
			fmt.Fprintf(w, "\n## %s\n\n", scenario)
			if c.comparesPools() {
				fmt.Fprintln(w, "| pools | strategy | jobs | deadlines met | mean cost % of on-demand | p90 cost % | mean gap to optimum | p90 gap | mean gap to all-pools optimum |")
				fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|")
			} else {
				fmt.Fprintln(w, "| strategy | jobs | deadlines met | mean cost % of on-demand | p90 cost % | mean gap to optimum | p90 gap |")
				fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
			}
		}
		if c.comparesPools() {
			fmt.Fprintf(w, "| %s | %s | %d | %d | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% |\n",
				r.Pools, r.Strategy, r.Jobs, r.DeadlineMet, r.MeanCostPct, r.P90CostPct, r.MeanGapPct, r.P90GapPct, r.MeanGapAllPct)
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %d | %.1f%% | %.1f%% | %.1f%% | %.1f%% |\n",
			r.Strategy, r.Jobs, r.DeadlineMet, r.MeanCostPct, r.P90CostPct, r.MeanGapPct, r.P90GapPct)
	}
	_, err := fmt.Fprintln(w)
	return err
}

func hoursList(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Hours()
	}
	return out
}

// poolStrategies are the strategies a pool comparison plays by default:
// on-demand only is its 100 % and spot-only may miss deadlines.
func poolStrategies() []spot.Strategy {
	return []spot.Strategy{spot.Greedy{}, spot.UniformProgress{}, spot.NewGpuq(), spot.NewLookAhead()}
}

// comparePools prints one job played on each pool alone and on all of them.
func comparePools(cmd *cobra.Command, c simulateConfig, traces []spot.Trace, job spot.Job) error {
	cmp, err := spot.ComparePools(traces, job, c.Prices, c.Strategies, c.Strategies)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if c.Output == "json" {
		return writeJSON(w, cmp)
	}
	gapAll := func(cost int64) string {
		return fmt.Sprintf("%.1f%%", 100*float64(cost-cmp.Optimum.CostMicros)/float64(cmp.Optimum.CostMicros))
	}
	t := newTable(w, "POOLS", "STRATEGY", "COST "+c.Prices.Currency, "% OF ON-DEMAND", "DEADLINE MET", "PREEMPTIONS", "MOVES", "GAP TO OPTIMUM", "GAP TO ALL-POOLS OPTIMUM")
	for i, pool := range cmp.Pools {
		for _, o := range cmp.Single[i] {
			t.row(pool, o.Strategy, formatMicros(o.CostMicros), fmt.Sprintf("%.1f%%", o.CostPct), o.DeadlineMet,
				o.Preemptions, o.Moves, fmt.Sprintf("%.1f%%", o.GapPct), gapAll(o.CostMicros))
		}
		opt := cmp.SingleOptimum[i]
		t.row(pool, "optimum", formatMicros(opt.CostMicros), fmt.Sprintf("%.1f%%", cmp.CostPct(opt.CostMicros)), opt.DeadlineMet,
			"", "", "0.0%", gapAll(opt.CostMicros))
	}
	for _, o := range cmp.Multi {
		t.row(spot.AllPools, o.Strategy, formatMicros(o.CostMicros), fmt.Sprintf("%.1f%%", o.CostPct), o.DeadlineMet,
			o.Preemptions, o.Moves, fmt.Sprintf("%.1f%%", o.GapPct), gapAll(o.CostMicros))
	}
	t.row(spot.AllPools, "optimum", formatMicros(cmp.Optimum.CostMicros), fmt.Sprintf("%.1f%%", cmp.CostPct(cmp.Optimum.CostMicros)),
		cmp.Optimum.DeadlineMet, "", "", "0.0%", "0.0%")
	return t.flush()
}
