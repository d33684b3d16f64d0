package spot

import "time"

// Gpuq is gpuq's own strategy. It differs from Uniform Progress in three ways:
//   - it uses every spot pool of the job and, when it must pick one, picks
//     the pool whose capacity has lasted longest so far (learned from history);
//   - instead of keeping progress on the uniform line, it keeps a slack
//     reserve proportional to the work left, spends slack above the reserve
//     waiting for spot, and runs on-demand only once the slack reaches it;
//   - it leaves on-demand for spot as soon as capacity returns, as long as the
//     restart overhead still fits in the slack, so that on-demand covers
//     outages and not the whole remainder of the job.
type Gpuq struct {
	// Reserve is the share of the job's initial slack kept back, scaled by the
	// share of work left, for on-demand fallbacks and returns to spot.
	Reserve float64
	// Margin is the slack, in restart overheads, below which the job stays
	// on on-demand to the end.
	Margin float64
	// PriorTicks is the mean run of capacity assumed for a pool not yet seen.
	PriorTicks float64
}

// NewGpuq returns gpuq's strategy with its default settings.
func NewGpuq() Gpuq { return Gpuq{Reserve: 0.25, Margin: 2, PriorTicks: 6} }

func (Gpuq) Name() string { return "gpuq" }

func (g Gpuq) Decide(s State) Action {
	if s.Current.Kind == Spot && s.Pools[s.Current.Pool].Available {
		return guard(s, spotIn(s.Current.Pool, "spot pool still available"))
	}
	slack := s.Slack()
	margin := time.Duration(g.Margin*float64(s.Overhead)) + s.Tick
	pool := g.longestLived(s)
	if s.Current.Kind == OnDemand {
		if pool >= 0 && slack-s.Overhead >= margin {
			return guard(s, spotIn(pool, "spot is back and the restart fits in the slack"))
		}
		return onDemand("on-demand until spot returns")
	}
	if pool >= 0 {
		return guard(s, spotIn(pool, "spot available in the longest-lived pool"))
	}
	initial := s.Deadline - s.Compute
	reserve := time.Duration(g.Reserve*float64(initial)*float64(s.Compute-s.Done)/float64(s.Compute)) + margin
	if slack > reserve {
		return guard(s, wait("no spot capacity, slack above the reserve"))
	}
	return guard(s, onDemand("no spot capacity, slack down to the reserve"))
}

// longestLived returns the available pool with the longest mean run of
// capacity so far, or -1 when no pool has capacity.
func (g Gpuq) longestLived(s State) int {
	best, bestRun := -1, 0.0
	for i, p := range s.Pools {
		if !p.Available {
			continue
		}
		if run := p.History.MeanUpRun(g.PriorTicks); best < 0 || run > bestRun {
			best, bestRun = i, run
		}
	}
	return best
}
