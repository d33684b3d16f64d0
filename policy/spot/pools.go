package spot

import "fmt"

// Labels of the rows of a pool sweep that are not one pool's.
const (
	EachAlone = "each pool alone" // every pool as the job's only one, averaged
	BestAlone = "best pool alone" // the pool whose optimum was lowest, known in hindsight
	AllPools  = "all pools"       // every pool, with moves between them
)

// PoolComparison is one job that may run in several pools, played twice:
// on each pool alone (with on-demand as the fallback), and on all of them
// with a Move for every change of zone.
type PoolComparison struct {
	Pools []string `json:"pools"`
	// Single[i] is each single-pool strategy on pool i alone, its gap
	// measured against SingleOptimum[i].
	Single        [][]Outcome `json:"single"`
	SingleOptimum []Result    `json:"single_optimum"`
	// Multi is each multi-pool strategy on every pool, its gap measured
	// against Optimum.
	Multi   []Outcome `json:"multi"`
	Optimum Result    `json:"optimum"`
	// OnDemandMicros is what on-demand only costs, the same on every pool.
	OnDemandMicros int64 `json:"on_demand_micros"`
}

// CostPct is cost as a percentage of on-demand only.
func (c PoolComparison) CostPct(cost int64) float64 {
	return 100 * float64(cost) / float64(c.OnDemandMicros)
}

// BestSingle returns the index of the pool whose optimum is lowest.
func (c PoolComparison) BestSingle() int {
	best := 0
	for i, r := range c.SingleOptimum {
		if r.CostMicros < c.SingleOptimum[best].CostMicros {
			best = i
		}
	}
	return best
}

// ComparePools plays job on each of traces alone under single, and on all of
// them under multi, each against its optimum and on-demand only.
func ComparePools(traces []Trace, job Job, prices Prices, single, multi []Strategy) (PoolComparison, error) {
	if err := prices.validate(); err != nil {
		return PoolComparison{}, err
	}
	if len(traces) < 2 {
		return PoolComparison{}, fmt.Errorf("traces: a pool comparison needs at least two pools, got %d", len(traces))
	}
	all, err := newModel(traces, job)
	if err != nil {
		return PoolComparison{}, err
	}
	od, err := all.simulate(prices, OnDemandOnly{})
	if err != nil {
		return PoolComparison{}, err
	}
	outcomes := func(m model, opt Result, strategies []Strategy) ([]Outcome, error) {
		var out []Outcome
		for _, st := range strategies {
			r, err := m.simulate(prices, st)
			if err != nil {
				return nil, err
			}
			out = append(out, Outcome{
				Result:  r,
				CostPct: 100 * float64(r.CostMicros) / float64(od.CostMicros),
				GapPct:  100 * float64(r.CostMicros-opt.CostMicros) / float64(opt.CostMicros),
			})
		}
		return out, nil
	}
	c := PoolComparison{Optimum: all.optimum(prices), OnDemandMicros: od.CostMicros}
	for i, tr := range traces {
		c.Pools = append(c.Pools, tr.Name)
		m, err := newModel(traces[i:i+1], job)
		if err != nil {
			return PoolComparison{}, err
		}
		opt := m.optimum(prices)
		o, err := outcomes(m, opt, single)
		if err != nil {
			return PoolComparison{}, err
		}
		c.SingleOptimum = append(c.SingleOptimum, opt)
		c.Single = append(c.Single, o)
	}
	if c.Multi, err = outcomes(all, c.Optimum, multi); err != nil {
		return PoolComparison{}, err
	}
	return c, nil
}

// SweepPools runs ComparePools over grid on every scenario, on workers
// goroutines, calling progress (if not nil) after each job. For every
// scenario, and then for all of them together, it returns rows for: each
// single strategy and the optimum on each pool alone (per scenario only),
// the same averaged over the pools (EachAlone), the lowest single-pool
// optimum (BestAlone), and each multi strategy and the optimum on all pools
// (AllPools). Every row also carries its gap to the all-pools optimum.
func SweepPools(scenarios []Scenario, grid Grid, prices Prices, single, multi []Strategy, workers int, progress func(done, total int)) ([]Summary, error) {
	jobs, err := gridJobs(scenarios, grid)
	if err != nil {
		return nil, err
	}
	out := make([]PoolComparison, len(jobs))
	err = runJobs(scenarios, jobs, workers, progress, func(k int) (err error) {
		j := jobs[k]
		out[k], err = ComparePools(scenarios[j.scenario].Traces, j.job, prices, single, multi)
		return err
	})
	if err != nil {
		return nil, err
	}
	gap := func(cost, opt int64) float64 { return 100 * float64(cost-opt) / float64(opt) }
	var rows []Summary
	for si := range len(scenarios) + 1 {
		name := "all"
		if si < len(scenarios) {
			name = scenarios[si].Name
		}
		var picked []PoolComparison
		for k, c := range out {
			if si == len(scenarios) || jobs[k].scenario == si {
				picked = append(picked, c)
			}
		}
		if si < len(scenarios) {
			for i, tr := range scenarios[si].Traces {
				for x, st := range single {
					var agg samples
					for _, c := range picked {
						o := c.Single[i][x]
						agg.add(o.CostPct, o.GapPct, gap(o.CostMicros, c.Optimum.CostMicros), o.DeadlineMet)
					}
					rows = append(rows, agg.summary(name, tr.Name, st.Name()))
				}
				var agg samples
				for _, c := range picked {
					o := c.SingleOptimum[i]
					agg.add(c.CostPct(o.CostMicros), 0, gap(o.CostMicros, c.Optimum.CostMicros), o.DeadlineMet)
				}
				rows = append(rows, agg.summary(name, tr.Name, "optimum"))
			}
		}
		for x, st := range single {
			var agg samples
			for _, c := range picked {
				for i := range c.Pools {
					o := c.Single[i][x]
					agg.add(o.CostPct, o.GapPct, gap(o.CostMicros, c.Optimum.CostMicros), o.DeadlineMet)
				}
			}
			rows = append(rows, agg.summary(name, EachAlone, st.Name()))
		}
		var each, best samples
		for _, c := range picked {
			for _, o := range c.SingleOptimum {
				each.add(c.CostPct(o.CostMicros), 0, gap(o.CostMicros, c.Optimum.CostMicros), o.DeadlineMet)
			}
			o := c.SingleOptimum[c.BestSingle()]
			best.add(c.CostPct(o.CostMicros), 0, gap(o.CostMicros, c.Optimum.CostMicros), o.DeadlineMet)
		}
		rows = append(rows, each.summary(name, EachAlone, "optimum"), best.summary(name, BestAlone, "optimum"))
		for x, st := range multi {
			var agg samples
			for _, c := range picked {
				o := c.Multi[x]
				agg.add(o.CostPct, o.GapPct, o.GapPct, o.DeadlineMet)
			}
			rows = append(rows, agg.summary(name, AllPools, st.Name()))
		}
		var all samples
		for _, c := range picked {
			all.add(c.CostPct(c.Optimum.CostMicros), 0, 0, c.Optimum.DeadlineMet)
		}
		rows = append(rows, all.summary(name, AllPools, "optimum"))
	}
	return rows, nil
}
