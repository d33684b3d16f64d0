package spot

import (
	"fmt"
	"sort"
	"time"
)

// Strategies returns every strategy by name, in report order.
func Strategies() []Strategy {
	return []Strategy{OnDemandOnly{}, SpotOnly{}, Greedy{}, UniformProgress{}, NewGpuq(), NewLookAhead()}
}

// KeepOnDemand is a strategy with on-demand kept to the end once it takes
// it: what a scheduler that never moves a running job back to spot would
// pay for its advice. gpuq's rebalancer is what spares the live scheduler
// that (gpuq simulate --keep-on-demand measures the difference).
type KeepOnDemand struct{ Strategy }

func (k KeepOnDemand) Decide(s State) Action {
	if s.Current.Kind == OnDemand {
		return onDemand("on-demand kept to the end")
	}
	return k.Strategy.Decide(s)
}

// ByName returns the strategy called name.
func ByName(name string) (Strategy, error) {
	var names []string
	for _, st := range Strategies() {
		if st.Name() == name {
			return st, nil
		}
		names = append(names, st.Name())
	}
	sort.Strings(names)
	return nil, fmt.Errorf("strategy: unknown %q, want one of %v", name, names)
}

// firstAvailable returns the current spot pool when it is still available,
// else the checkpoint's pool when available, else the lowest-numbered
// available pool, else -1.
func firstAvailable(s State) int {
	if s.Current.Kind == Spot && s.Pools[s.Current.Pool].Available {
		return s.Current.Pool
	}
	if i := s.checkpoint(); i >= 0 && s.Pools[i].Available {
		return i
	}
	for i, p := range s.Pools {
		if p.Available {
			return i
		}
	}
	return -1
}

// OnDemandOnly runs on on-demand capacity from start to finish: the cost
// every other strategy is compared with.
type OnDemandOnly struct{}

func (OnDemandOnly) Name() string { return "on-demand" }

func (OnDemandOnly) Decide(State) Action { return onDemand("on-demand only") }

// SpotOnly runs on spot whenever some pool has capacity and waits otherwise.
// It has no safety net and may miss the deadline; it is here for comparison.
type SpotOnly struct{}

func (SpotOnly) Name() string { return "spot-only" }

func (SpotOnly) Decide(s State) Action {
	if i := firstAvailable(s); i >= 0 {
		return spotIn(i, "spot available")
	}
	return wait("no spot capacity")
}

// Greedy is the paper's baseline: spot whenever available, wait otherwise,
// and on-demand to the end once the slack has run out.
type Greedy struct{}

func (Greedy) Name() string { return "greedy" }

func (Greedy) Decide(s State) Action {
	if s.Current.Kind == OnDemand {
		return onDemand("greedy stays on on-demand once the slack has run out")
	}
	if i := firstAvailable(s); i >= 0 {
		return guard(s, spotIn(i, "spot available"))
	}
	return guard(s, wait("no spot capacity, slack left"))
}

// UniformProgress is the policy of "Can't Be Late" (Wu et al., NSDI 2024,
// §5.2.2) as the authors' simulator implements it (strategy rc_cr_threshold,
// "Our policy: Uniform Progress", in sky_spot/strategies; its multi-region
// form multi_region_rc_cr_threshold when the job has several pools). In the
// paper's words, with cp(t) the progress made and ep(t) = C·t/D the uniform
// line:
//  1. Uniform Progress: idle and cp(t) < ep(t): switch to on-demand.
//  2. Taking Risks: switch to spot whenever it is available, and stay on it
//     until it is preempted.
//  3. Hysteresis: on on-demand, stay on it until cp(t) ≥ ep(t+2d).
//  4. Safety Net: idle (or on on-demand) with the time left within the work
//     left + 2d, rounded to ticks: on-demand to the end.
//
// The reference applies them in this order, which settles what the paper
// leaves open: on on-demand, the job stays there while no spot is available
// even once past the hysteresis line (it never leaves on-demand to go idle,
// which would pay a restart again), and leaves it for spot only when
// cp(t) > ep(t+2d). When the work left + d no longer fits, it keeps a spot
// instance past its overhead until preemption and takes on-demand otherwise
// (spot too when d is 0). With several pools it keeps the pool it holds,
// and otherwise tries the pool holding the checkpoint first and then the
// others in order (all pools share one spot price, so that is the cheapest).
// The simulator's shared safety net wraps it like every strategy; it never
// changes a decision of this policy while the deadline can still be met.
type UniformProgress struct{}

func (UniformProgress) Name() string { return "uniform-progress" }

func (u UniformProgress) Decide(s State) Action { return guard(s, u.decide(s)) }

// decide applies the paper's rules alone, without the shared safety net.
func (UniformProgress) decide(s State) Action {
	pool := firstAvailable(s)
	expected := func(t time.Duration) time.Duration {
		return time.Duration(float64(s.Compute) * float64(t) / float64(s.Deadline))
	}
	want := wait("no spot capacity, progress on or above the uniform line")
	if pool >= 0 {
		want = spotIn(pool, "taking risks: spot available")
	}
	if s.Done < expected(s.Elapsed) && pool < 0 {
		want = onDemand("behind the uniform line, no spot capacity")
	}
	if s.Current.Kind == OnDemand {
		switch {
		case pool < 0:
			want = onDemand("on on-demand, no spot capacity to go to")
		case s.Done <= expected(s.Elapsed+2*s.Overhead):
			want = onDemand("hysteresis: not yet 2d ahead of the uniform line")
		}
	}
	left := s.ticksLeft()
	work := s.Compute - s.Done
	if s.Current.Kind != Spot && ticksFor(work+2*s.Overhead, s.Tick) >= left {
		want = onDemand("safety net: time left within the work left + 2d")
	}
	if ticksFor(work+s.Overhead, s.Tick) >= left {
		if s.Current.Kind == Spot && s.Warmup == 0 {
			want = spotIn(s.Current.Pool, "deadline close: keep spot until preemption")
		} else {
			want = onDemand("deadline close: on-demand to the end")
		}
		if s.Overhead == 0 && pool >= 0 {
			want = spotIn(pool, "deadline close, but spot restarts cost nothing")
		}
	}
	return want
}

// ticksFor is the number of whole ticks d takes.
func ticksFor(d, tick time.Duration) int64 { return int64((d + tick - 1) / tick) }
