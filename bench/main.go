package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// options are the command line flags.
type options struct {
	jobs        int
	processJobs int
	latencyJobs int
	scaleJobs   int
	scalePools  int
	rate        float64
	trials      int
	runs        int
	workers     int
	slots       int
	submitters  int
	ackWait     time.Duration
	grace       time.Duration
	gpuq        string
	repo        string
	out         string
	only        string
	cpuProfile  string
	riverConns  int
	riverCLI    string
	pgStmts     bool
}

// maxWorkerSlots is the most slots a gpuq worker takes (worker.slots).
const maxWorkerSlots = 1024

// errRiverCLIMissing is why River's own benchmark figure is left out.
var errRiverCLIMissing = errors.New("River's CLI not found")

func main() {
	var o options
	flag.IntVar(&o.jobs, "jobs", 100_000, "jobs per submission and end-to-end throughput run (gpuq and River)")
	flag.IntVar(&o.processJobs, "process-jobs", 2_000, "jobs per end-to-end run with real processes (/bin/true)")
	flag.IntVar(&o.latencyJobs, "latency-jobs", 2_000, "jobs per dispatch latency run")
	flag.IntVar(&o.scaleJobs, "scale-jobs", 100_000, "jobs queued in the scale run")
	flag.IntVar(&o.scalePools, "scale-pools", 500, "pools offered in the scale run")
	flag.Float64Var(&o.rate, "rate", 200, "submissions per second in the dispatch latency run")
	flag.IntVar(&o.trials, "trials", 20, "recovery trials per kind (SIGKILL, notice)")
	flag.IntVar(&o.runs, "runs", 3, "measured runs per figure; the table shows their median")
	flag.IntVar(&o.workers, "workers", 2, "in-process gpuq workers in the throughput and latency runs")
	flag.IntVar(&o.slots, "slots", 32, "job slots per gpuq worker; River gets workers×slots MaxWorkers")
	flag.IntVar(&o.submitters, "submitters", 64, "goroutines calling queue.Submit concurrently")
	flag.DurationVar(&o.ackWait, "ack-wait", 0, "AckWait (and lease) of the worker processes in the recovery runs; 0 is the worker's default (30s)")
	flag.DurationVar(&o.grace, "grace", 5*time.Second, "grace after a notice in the recovery runs")
	flag.StringVar(&o.gpuq, "gpuq", "../bin/gpuq", "the gpuq binary the recovery runs start as worker processes")
	flag.StringVar(&o.repo, "repo", "..", "the gpuq repository (for the policy and store benchmarks)")
	flag.StringVar(&o.out, "out", "results", "directory for the JSON results")
	flag.StringVar(&o.only, "only", "", "comma-separated subset of: submit,e2e,process,latency,scale,recovery,placement,attempts,river (default all)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (scheduler and workers run in this process)")
	flag.IntVar(&o.riverConns, "river-conns", 32, "River's pgx pool size (each gpuq process's pool holds up to 32 connections)")
	flag.StringVar(&o.riverCLI, "river-cli", "river", "River's CLI, for its own benchmark (river bench) beside the others; left out when not found")
	flag.BoolVar(&o.pgStmts, "pg-statements", false, "show what each PostgreSQL statement of gpuq's end-to-end runs cost per job (pg_stat_statements, which itself costs a little on every statement)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// report is what the run writes as JSON.
type report struct {
	StartedAt time.Time      `json:"started_at"`
	Machine   machine        `json:"machine"`
	Settings  map[string]any `json:"settings"`
	Figures   []figure       `json:"figures"`
	Runs      map[string]any `json:"runs"`
}

type machine struct {
	CPUs       int    `json:"cpus"`
	GoVersion  string `json:"go_version"`
	PostgreSQL string `json:"postgresql"`
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
}

// figure is one row of the table.
type figure struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target,omitempty"`
	Met    *bool   `json:"met,omitempty"`
	Note   string  `json:"note,omitempty"`
}

func run(ctx context.Context, o options) error {
	want := func(name string) bool {
		return o.only == "" || slices.Contains(strings.Split(o.only, ","), name)
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	dir, err := os.MkdirTemp("", "gpuq-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rep := report{StartedAt: time.Now().UTC(), Runs: map[string]any{}, Settings: map[string]any{
		"jobs": o.jobs, "process_jobs": o.processJobs, "latency_jobs": o.latencyJobs, "rate_per_sec": o.rate, "scale_jobs": o.scaleJobs, "scale_pools": o.scalePools,
		"trials": o.trials, "runs": o.runs, "gpuq_workers": o.workers, "gpuq_slots_per_worker": o.slots,
		"river_max_workers": o.workers * o.slots, "river_pool_conns": o.riverConns, "submitters": o.submitters,
		"ack_wait": o.ackWait.String(), "grace": o.grace.String(), "postgresql": "private cluster, fsync=on, synchronous_commit=on",
	}}
	rep.Machine = machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadBefore: loadavg()}
	progress("starting PostgreSQL (fsync on) and NATS in %s", dir)
	s, err := startStack(ctx, dir, o.pgStmts)
	if err != nil {
		return err
	}
	defer s.Close()
	rep.Machine.PostgreSQL = s.pgVersion(ctx)
	add := func(f figure) { rep.Figures = append(rep.Figures, f) }
	warm := max(o.jobs/20, 200)

	if want("submit") {
		for _, direct := range []bool{false, true} {
			name := "submission via queue.Submit"
			if direct {
				name = "submission via direct JetStream publish"
			}
			vals, err := repeat(o.runs, name, func(i int) (float64, error) {
				if i == 0 {
					if _, err := s.measureSubmit(ctx, warm, o.submitters, direct); err != nil {
						return 0, err
					}
				}
				return s.measureSubmit(ctx, o.jobs, o.submitters, direct)
			})
			if err != nil {
				return err
			}
			rep.Runs[name] = vals
			add(figure{Name: name, Value: median(vals), Unit: "jobs/s"})
		}
	}
	// The best figure of each system decides the ratio; the pairs measured
	// the same way (jobs submitted while it works, or a queue filled before
	// it starts) are shown beside it.
	const gpuqSide, riverSide = 0, 1
	var best [2][2]float64 // [filled first?][gpuqSide or riverSide]: the best figure measured that way
	record := func(preload bool, side int, v float64) {
		i := 0
		if preload {
			i = 1
		}
		best[i][side] = max(best[i][side], v)
	}
	// cpuFigure shows the CPU a job cost in the runs of a throughput
	// figure (their median), split between the benchmark's process and
	// PostgreSQL: on a machine whose cores are all busy, throughput is
	// what that cost allows.
	cpuFigure := func(name, process string, cpus []cpuPerJob) {
		if len(cpus) == 0 || cpus[0].Total() == 0 {
			return
		}
		slices.SortFunc(cpus, func(a, b cpuPerJob) int { return cmp.Compare(a.Total(), b.Total()) })
		m := cpus[len(cpus)/2]
		add(figure{Name: "  CPU per job", Value: m.Total(), Unit: "µs", Note: fmt.Sprintf("%s: process %.0f µs (%s), PostgreSQL %.0f µs", name, m.Process, process, m.Postgres)})
	}
	e2e := func(name, command string, n int, preload bool, slots int) error {
		var cpus []cpuPerJob
		var stmts []stmtCost // the last run's
		vals, err := repeat(o.runs, name, func(i int) (float64, error) {
			if i == 0 {
				if _, err := s.measureE2E(ctx, command, min(warm, n), o.workers, slots, o.submitters, preload); err != nil {
					return 0, err
				}
			}
			r, err := s.measureE2E(ctx, command, n, o.workers, slots, o.submitters, preload)
			cpus = append(cpus, r.CPU)
			stmts = r.Statements
			return r.JobsPerSec, err
		})
		if err != nil {
			return err
		}
		rep.Runs[name] = vals
		if command == `["gpuq:noop"]` {
			record(preload, gpuqSide, median(vals))
		}
		how := "submitted while it works"
		if preload {
			how = "submitted before the control plane and the workers start, timed from their start"
		}
		add(figure{Name: name, Value: median(vals), Unit: "jobs/s", Note: fmt.Sprintf("%d jobs, %d workers × %d slots, %s", n, o.workers, slots, how)})
		cpuFigure(name, "control plane, workers, NATS server", cpus)
		for _, c := range stmts[:min(len(stmts), 8)] {
			add(figure{Name: "  PostgreSQL time per job: " + c.Name, Value: c.ExecUS + c.PlanUS, Unit: "µs", Note: c.String()})
		}
		return nil
	}
	// River's own benchmark runs 2,000 jobs at once on a queue filled
	// beforehand; gpuq gets as many slots, and its queue filled the same way.
	wide := min(riverBenchMaxWorkers/max(o.workers, 1), maxWorkerSlots)
	if want("e2e") {
		if err := e2e("end-to-end gpuq, in-process no-op", `["gpuq:noop"]`, o.jobs, false, o.slots); err != nil {
			return err
		}
		name := fmt.Sprintf("end-to-end gpuq, in-process no-op, %d × %d slots, queue filled first", o.workers, wide)
		if err := e2e(name, `["gpuq:noop"]`, o.jobs, true, wide); err != nil {
			return err
		}
	}
	if want("river") {
		for _, setup := range riverSetups(o.workers * o.slots) {
			var cpus []cpuPerJob
			vals, err := repeat(o.runs, setup.name, func(i int) (float64, error) {
				if i == 0 {
					if _, err := s.measureRiver(ctx, warm, o.riverConns, setup); err != nil {
						return 0, err
					}
				}
				r, err := s.measureRiver(ctx, o.jobs, o.riverConns, setup)
				cpus = append(cpus, r.CPU)
				return r.JobsPerSec, err
			})
			if err != nil {
				return err
			}
			rep.Runs[setup.name] = vals
			record(setup.preload, riverSide, median(vals))
			add(figure{Name: setup.name, Value: median(vals), Unit: "jobs/s", Note: fmt.Sprintf("%d jobs, %s", o.jobs, setup.note)})
			cpuFigure(setup.name, "River's client and its inserts", cpus)
		}
		// River's own benchmark, when its CLI is installed: the figure its
		// authors would quote for this machine.
		const name = "end-to-end River, river bench (its CLI)"
		vals, err := repeat(o.runs, name, func(int) (float64, error) {
			v, found, err := s.riverCLIFigure(ctx, o.riverCLI, o.jobs)
			if !found {
				err = errRiverCLIMissing
			}
			return v, err
		})
		switch {
		case errors.Is(err, errRiverCLIMissing):
			progress("%s: %q not found, figure left out (go install github.com/riverqueue/river/cmd/river@latest adds it)", name, o.riverCLI)
			rep.Runs[name] = "River's CLI not found: " + o.riverCLI
		case err != nil:
			return err
		default:
			rep.Runs[name] = vals
			record(true, riverSide, median(vals)) // river bench fills its queue first
			add(figure{Name: name, Value: median(vals), Unit: "jobs/s", Note: fmt.Sprintf("river bench --num-total-jobs %d on a fresh database of the same cluster", o.jobs)})
		}
	}
	if g, r := max(best[0][gpuqSide], best[1][gpuqSide]), max(best[0][riverSide], best[1][riverSide]); g > 0 && r > 0 {
		add(figure{Name: "end-to-end ratio gpuq / River", Value: g / r, Unit: "×", Target: "≥ 1.0", Met: ptr(g >= r), Note: "gpuq's best figure above against River's best"})
		for i, pair := range best {
			if pair[gpuqSide] == 0 || pair[riverSide] == 0 {
				continue
			}
			name, note := "  ratio, both submitted while working", "gpuq against River's faster variant inserting while it works"
			if i == 1 {
				name, note = "  ratio, both with the queue filled first", "gpuq against River on its own benchmark's settings, or its CLI's figure when higher"
			}
			add(figure{Name: name, Value: pair[gpuqSide] / pair[riverSide], Unit: "×", Note: note})
		}
	}
	if want("process") {
		if err := e2e("end-to-end gpuq, process /bin/true", `[/bin/true]`, o.processJobs, false, o.slots); err != nil {
			return err
		}
	}
	if want("latency") {
		name := "dispatch latency"
		var p50s, p99s, placedP50s []float64
		_, err := repeat(o.runs, name, func(int) (float64, error) {
			r, err := s.measureLatency(ctx, o.latencyJobs, max(o.latencyJobs/10, 50), o.rate, o.workers, o.slots)
			p50s, p99s, placedP50s = append(p50s, r.P50), append(p99s, r.P99), append(placedP50s, r.PlacedP50)
			return r.P50, err
		})
		if err != nil {
			return err
		}
		rep.Runs[name] = map[string]any{"p50_ms": p50s, "p99_ms": p99s, "placed_p50_ms": placedP50s}
		note := fmt.Sprintf("%d jobs at %.0f/s, submit → running event", o.latencyJobs, o.rate)
		// The targets hold at 200 submissions/s; a slower run is not judged.
		judged := func(ok bool) *bool {
			if o.rate < 200 {
				return nil
			}
			return ptr(ok)
		}
		add(figure{Name: "dispatch latency p50", Value: median(p50s), Unit: "ms", Target: "≤ 5 at 200/s", Met: judged(median(p50s) <= 5), Note: note})
		add(figure{Name: "dispatch latency p99", Value: median(p99s), Unit: "ms", Target: "≤ 25 at 200/s", Met: judged(median(p99s) <= 25), Note: note})
		add(figure{Name: "  of which submit → placed p50", Value: median(placedP50s), Unit: "ms", Note: "the scheduler's share"})
	}
	if want("scale") {
		r, err := s.measureScale(ctx, o.scaleJobs, o.scalePools, o.submitters)
		if err != nil {
			return fmt.Errorf("scale: %w", err)
		}
		progress("scale: %d jobs on %d pools: submit %.0f/s, dispatch %.0f/s, heap %.0f MB", r.Jobs, r.Pools, r.SubmitPerSec, r.DispatchPerSec, r.HeapMB)
		rep.Runs["scale"] = r
		note := fmt.Sprintf("%d jobs queued, %d pools offered (%d used)", r.Jobs, r.Pools, r.PoolsUsed)
		add(figure{Name: "scale: submission", Value: r.SubmitPerSec, Unit: "jobs/s", Note: note})
		add(figure{Name: "scale: dispatch (submit → placed)", Value: r.DispatchPerSec, Unit: "jobs/s", Note: note})
		slowdown := r.LastTenthPerSec / r.FirstTenthPerSec
		add(figure{Name: "scale: placement rate, last tenth / second", Value: slowdown, Unit: "×", Target: "≥ 0.8", Met: ptr(slowdown >= 0.8),
			Note: fmt.Sprintf("%.0f → %.0f jobs/s: no decision grows with the queue", r.FirstTenthPerSec, r.LastTenthPerSec)})
		add(figure{Name: "scale: heap with every job queued", Value: r.HeapMB, Unit: "MB", Note: "scheduler, worker service and embedded NATS in this process"})
	}
	if want("recovery") {
		gpuqBin, err := filepath.Abs(o.gpuq)
		if err != nil {
			return err
		}
		if _, err := os.Stat(gpuqBin); err != nil {
			return fmt.Errorf("the recovery runs need the gpuq binary (make build): %w", err)
		}
		kill, err := s.measureRecovery(ctx, gpuqBin, syscall.SIGKILL, o.trials, o.ackWait, o.grace)
		if err != nil {
			return err
		}
		rep.Runs["recovery after SIGKILL"] = kill
		ackWait := "default AckWait"
		if o.ackWait > 0 {
			ackWait = "AckWait " + o.ackWait.String()
		}
		add(figure{Name: "recovery after SIGKILL p50", Value: kill.P50, Unit: "ms", Target: "≤ 1000", Met: ptr(kill.P50 <= 1000), Note: fmt.Sprintf("%d trials, max %.0f ms, %s", kill.Trials, kill.Max, ackWait)})
		notice, err := s.measureRecovery(ctx, gpuqBin, syscall.SIGTERM, o.trials, o.ackWait, o.grace)
		if err != nil {
			return err
		}
		rep.Runs["recovery after a notice"] = notice
		add(figure{Name: "recovery after a notice p50", Value: notice.P50, Unit: "ms", Target: "≤ 1000", Met: ptr(notice.P50 <= 1000), Note: fmt.Sprintf("%d trials, max %.0f ms", notice.Trials, notice.Max)})
	}
	if want("placement") {
		progress("placement: go test -bench BenchmarkPlace ./policy/ (-count %d)", o.runs)
		vals, err := measurePlacement(ctx, o.repo, o.runs)
		if err != nil {
			return err
		}
		rep.Runs["placement"] = vals
		add(figure{Name: "placement decision, 10,000 offers", Value: median(vals), Unit: "ms", Note: "policy.BenchmarkPlace, 50 rules"})
	}
	if want("attempts") {
		progress("attempts: go test -bench BenchmarkAttemptsWithJobsQueued ./queue/store/ (-count %d)", o.runs)
		rates, err := measureAttempts(ctx, o.repo, o.runs)
		if err != nil {
			return err
		}
		few, many := median(rates[attemptsFew]), median(rates[attemptsMany])
		rep.Runs["attempts"] = rates
		add(figure{Name: "attempts with 100,000 jobs queued", Value: many, Unit: "jobs/s",
			Note: "claim, heartbeat, success in batches of 32 through the store, one connection, stale statistics, fsync off"})
		add(figure{Name: "attempts, 100,000 queued / 3,200 queued", Value: many / few, Unit: "×", Target: "≥ 0.8", Met: ptr(many/few >= 0.8),
			Note: fmt.Sprintf("%.0f → %.0f jobs/s: no write grows with the queue", few, many)})
	}
	rep.Machine.LoadAfter = loadavg()
	printTable(os.Stdout, rep)
	return writeJSON(o.out, rep)
}

// repeat runs measure runs times and returns the figures.
func repeat(runs int, name string, measure func(i int) (float64, error)) ([]float64, error) {
	var vals []float64
	for i := range runs {
		v, err := measure(i)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		progress("%s: run %d/%d: %.1f", name, i+1, runs, v)
		vals = append(vals, v)
	}
	return vals, nil
}

func printTable(w *os.File, rep report) {
	fmt.Fprintf(w, "\ngpuq benchmark, %s, %d CPUs, PostgreSQL %s (fsync on), load %s → %s\n\n", rep.StartedAt.Format(time.RFC3339), rep.Machine.CPUs, rep.Machine.PostgreSQL, rep.Machine.LoadBefore, rep.Machine.LoadAfter)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tVALUE\tUNIT\tTARGET\tMET\tNOTE")
	for _, f := range rep.Figures {
		met := ""
		if f.Met != nil {
			met = map[bool]string{true: "yes", false: "NO"}[*f.Met]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Name, format(f.Value), f.Unit, f.Target, met, f.Note)
	}
	tw.Flush()
}

func format(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func writeJSON(dir string, rep report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, rep.StartedAt.Format("20060102T150405Z")+".json")
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return err
	}
	progress("wrote %s", path)
	return nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// median of vals (not modified).
func median(vals []float64) float64 { return percentile(vals, 50) }

// percentile by the nearest-rank method; 100 is the maximum.
func percentile(vals []float64, p float64) float64 {
	if len(vals) == 0 {
		return 0
	}
	s := slices.Clone(vals)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.999999) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

func ptr[T any](v T) *T { return &v }
