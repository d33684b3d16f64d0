package spot

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"time"
)

// Outcome is one strategy's result on one job, next to on-demand only and the
// optimum.
type Outcome struct {
	Result
	// CostPct is the cost as a percentage of running on on-demand only.
	CostPct float64 `json:"cost_pct_of_on_demand"`
	// GapPct is how much more than the optimum it cost, in percent of it.
	GapPct float64 `json:"gap_to_optimum_pct"`
}

// Comparison is every strategy's outcome on one job.
type Comparison struct {
	Optimum  Result    `json:"optimum"`
	Outcomes []Outcome `json:"strategies"`
}

// Compare simulates job under each strategy and measures it against
// on-demand only and the optimum.
func Compare(traces []Trace, job Job, prices Prices, strategies []Strategy) (Comparison, error) {
	if err := prices.validate(); err != nil {
		return Comparison{}, err
	}
	m, err := newModel(traces, job)
	if err != nil {
		return Comparison{}, err
	}
	od, err := m.simulate(prices, OnDemandOnly{})
	if err != nil {
		return Comparison{}, err
	}
	c := Comparison{Optimum: m.optimum(prices)}
	for _, st := range strategies {
		r, err := m.simulate(prices, st)
		if err != nil {
			return Comparison{}, err
		}
		c.Outcomes = append(c.Outcomes, Outcome{
			Result:  r,
			CostPct: 100 * float64(r.CostMicros) / float64(od.CostMicros),
			GapPct:  100 * float64(r.CostMicros-c.Optimum.CostMicros) / float64(c.Optimum.CostMicros),
		})
	}
	return c, nil
}

// Scenario is a set of spot pools one job may use, such as the zones of one
// card inside its residency class.
type Scenario struct {
	Name   string
	Traces []Trace
}

// Grid is the set of jobs a sweep replays on every scenario: each compute ×
// slack × overhead, started at StartOffset and then every StartStep while the
// deadline fits in the traces, each with the same Move between pools.
type Grid struct {
	Computes    []time.Duration
	Slacks      []float64 // deadline = compute × (1 + slack)
	Overheads   []time.Duration
	StartStep   time.Duration
	StartOffset time.Duration // the first start; shifting it gives held-out jobs
	Move        Move
}

// Summary aggregates one strategy over the jobs of a sweep.
type Summary struct {
	Scenario string `json:"scenario"` // "all" for every scenario together
	// Pools says which of the scenario's pools the strategy could use, in a
	// pool sweep (SweepPools): one pool's name, EachAlone, BestAlone or
	// AllPools. Empty in a Sweep, where every strategy may use every pool.
	Pools       string  `json:"pools,omitempty"`
	Strategy    string  `json:"strategy"`
	Jobs        int     `json:"jobs"`
	DeadlineMet int     `json:"deadline_met"`
	MeanCostPct float64 `json:"mean_cost_pct_of_on_demand"`
	P90CostPct  float64 `json:"p90_cost_pct_of_on_demand"`
	// MeanGapPct and P90GapPct are measured against the optimum over the
	// pools the row could use.
	MeanGapPct float64 `json:"mean_gap_to_optimum_pct"`
	P90GapPct  float64 `json:"p90_gap_to_optimum_pct"`
	// MeanGapAllPct is measured against the optimum over every pool of the
	// scenario, moves included: the true lower bound.
	MeanGapAllPct float64 `json:"mean_gap_to_all_pools_optimum_pct"`
}

type sweepJob struct {
	scenario int
	job      Job
}

// Sweep compares strategies over grid on every scenario, on workers
// goroutines, calling progress (if not nil) after each job. It returns one
// Summary per strategy for every scenario, then for all of them together.
func Sweep(scenarios []Scenario, grid Grid, prices Prices, strategies []Strategy, workers int, progress func(done, total int)) ([]Summary, error) {
	jobs, err := gridJobs(scenarios, grid)
	if err != nil {
		return nil, err
	}
	out := make([]Comparison, len(jobs))
	err = runJobs(scenarios, jobs, workers, progress, func(k int) (err error) {
		j := jobs[k]
		out[k], err = Compare(scenarios[j.scenario].Traces, j.job, prices, strategies)
		return err
	})
	if err != nil {
		return nil, err
	}
	var rows []Summary
	for si := range len(scenarios) + 1 {
		name := "all"
		if si < len(scenarios) {
			name = scenarios[si].Name
		}
		for x, st := range strategies {
			var agg samples
			for k, c := range out {
				if si < len(scenarios) && jobs[k].scenario != si {
					continue
				}
				o := c.Outcomes[x]
				agg.add(o.CostPct, o.GapPct, o.GapPct, o.DeadlineMet)
			}
			rows = append(rows, agg.summary(name, "", st.Name()))
		}
	}
	return rows, nil
}

// gridJobs lays grid over every scenario.
func gridJobs(scenarios []Scenario, grid Grid) ([]sweepJob, error) {
	if grid.StartStep <= 0 {
		return nil, fmt.Errorf("grid.start_step: must be > 0, got %v", grid.StartStep)
	}
	if grid.StartOffset < 0 {
		return nil, fmt.Errorf("grid.start_offset: must be ≥ 0, got %v", grid.StartOffset)
	}
	var jobs []sweepJob
	for si, sc := range scenarios {
		if len(sc.Traces) == 0 {
			return nil, fmt.Errorf("scenario %s: traces: need at least one spot pool", sc.Name)
		}
		end := sc.Traces[0].Duration()
		for _, tr := range sc.Traces[1:] {
			end = min(end, tr.Duration())
		}
		for _, c := range grid.Computes {
			for _, sl := range grid.Slacks {
				for _, d := range grid.Overheads {
					deadline := time.Duration(float64(c) * (1 + sl))
					for start := grid.StartOffset; start+deadline <= end; start += grid.StartStep {
						jobs = append(jobs, sweepJob{si, Job{Compute: c, Deadline: deadline, Overhead: d, Start: start, Move: grid.Move}})
					}
				}
			}
		}
	}
	return jobs, nil
}

// runJobs calls run for every job on workers goroutines, calling progress
// (if not nil) after each, and returns the first job's error.
func runJobs(scenarios []Scenario, jobs []sweepJob, workers int, progress func(done, total int), run func(k int) error) error {
	errs := make([]error, len(jobs))
	next := make(chan int)
	finished := make(chan int)
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for k := range next {
				errs[k] = run(k)
				finished <- k
			}
		})
	}
	go func() {
		for k := range jobs {
			next <- k
		}
		close(next)
		wg.Wait()
		close(finished)
	}()
	done := 0
	for range finished {
		done++
		if progress != nil {
			progress(done, len(jobs))
		}
	}
	for k, err := range errs {
		if err != nil {
			return fmt.Errorf("scenario %s, job %+v: %w", scenarios[jobs[k].scenario].Name, jobs[k].job, err)
		}
	}
	return nil
}

// samples gathers one row's outcomes over the jobs of a sweep.
type samples struct {
	cost, gap, gapAll []float64
	met               int
}

func (a *samples) add(cost, gap, gapAll float64, met bool) {
	a.cost = append(a.cost, cost)
	a.gap = append(a.gap, gap)
	a.gapAll = append(a.gapAll, gapAll)
	if met {
		a.met++
	}
}

func (a *samples) summary(scenario, pools, strategy string) Summary {
	return Summary{
		Scenario: scenario, Pools: pools, Strategy: strategy, Jobs: len(a.cost), DeadlineMet: a.met,
		MeanCostPct: mean(a.cost), P90CostPct: p90(a.cost),
		MeanGapPct: mean(a.gap), P90GapPct: p90(a.gap),
		MeanGapAllPct: mean(a.gapAll),
	}
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// p90 is the nearest-rank 90th percentile.
func p90(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[int(math.Ceil(0.9*float64(len(s))))-1]
}
