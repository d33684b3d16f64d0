package spot

import (
	"fmt"
	"sort"
	"time"
)

// Strategies returns every strategy by name, in report order.
func Strategies() []Strategy {
	return []Strategy{OnDemandOnly{}, SpotOnly{}, Greedy{}, UniformProgress{}, NewGpuq()}
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
// else the lowest-numbered available pool, else -1.
func firstAvailable(s State) int {
	if s.Current.Kind == Spot && s.Pools[s.Current.Pool].Available {
		return s.Current.Pool
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

// UniformProgress is the policy of "Can't Be Late" (Wu et al., NSDI 2024):
// keep progress at or above the uniform line C·t/D, using spot whenever it is
// available and on-demand when behind the line; once on on-demand, stay
// there until progress is ahead of the line by 2d (hysteresis); commit to
// on-demand when the remaining slack is under 2d (safety net).
type UniformProgress struct{}

func (UniformProgress) Name() string { return "uniform-progress" }

func (UniformProgress) Decide(s State) Action {
	expected := func(t time.Duration) time.Duration {
		return time.Duration(float64(s.Compute) * float64(t) / float64(s.Deadline))
	}
	if s.Deadline-s.Elapsed < s.Compute-s.Done+2*s.Overhead {
		return onDemand("safety net: remaining time under remaining compute + 2d")
	}
	if s.Current.Kind == OnDemand && s.Done < expected(s.Elapsed+2*s.Overhead) {
		return guard(s, onDemand("hysteresis: not yet 2d ahead of the uniform line"))
	}
	if i := firstAvailable(s); i >= 0 {
		return guard(s, spotIn(i, "spot available"))
	}
	if s.Done < expected(s.Elapsed) {
		return guard(s, onDemand("behind the uniform line"))
	}
	return guard(s, wait("ahead of the uniform line, no spot capacity"))
}
