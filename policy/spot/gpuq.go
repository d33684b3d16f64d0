package spot

import "time"

// Gpuq is gpuq's own strategy. It differs from Uniform Progress in four ways:
//   - it uses every spot pool of the job and, when it must pick one, picks
//     the available pool that has been up longest (spot runs are
//     heavy-tailed: a pool that has lasted tends to last);
//   - instead of keeping progress on the uniform line, it waits for spot while
//     the slack is above a reserve and runs on-demand only below it;
//   - the reserve is what the restarts still to come will cost, learnt from
//     the pools' history: one restart overhead for every mean run of
//     capacity that fits in the work left (only time on spot is ever
//     preempted), plus a share of the initial slack scaled by the work left;
//   - it leaves on-demand for spot once a pool has been up for a few restart
//     overheads and the restart still fits in the slack, so that on-demand
//     covers outages and not the whole rest of the job, and a pool that
//     flickers back for a moment does not cost a restart.
//
// When moving between pools costs something (State.Move), it prefers the
// pool that holds the checkpoint, and moves to another only when that pool
// has held capacity for MoveSettle ticks, the restart plus the transfer
// fits in the slack, and the move (egress, and the
// restart on spot) costs less than both what a mean run of capacity there
// saves over on-demand and what waiting for the checkpoint's pool would
// cost: on-demand for whatever part of its expected outage, weighted by
// Outage, the slack above the reserve cannot absorb.
//
// The history is what the pools did before the decision, from before the
// job's start on: the live scheduler reads it from what every server has
// recorded, and the simulator replays the traces before the job's start
// into it. Nothing after the decision point is ever seen.
type Gpuq struct {
	// Share is the share of the initial slack kept back, scaled by the share
	// of work left: slack for the outages late in the job, when waiting for
	// spot is no longer an option. 0.2 keeps a fifth of it at the start and
	// none at the end.
	Share float64
	// Margin is the slack, in restart overheads (plus one tick), under which
	// the job stays on on-demand: a restart must leave at least this much.
	Margin float64
	// Settle is how long, in restart overheads, a pool must have been up
	// before the job leaves on-demand for it. A restart costs one overhead;
	// a pool that has held for several of them is past the short flickers
	// that would waste it.
	Settle float64
	// PriorRun is the mean run of capacity assumed before any is seen; it
	// weighs as two runs, so history soon outweighs it.
	PriorRun time.Duration
	// Outage weighs the outage expected of the checkpoint's pool when a move
	// to another pool is weighed against waiting for it. Slack spent waiting
	// is slack the outages still to come cannot use, and outages are
	// heavy-tailed, so the mean undercounts what waiting costs: 2 counts it
	// twice.
	Outage float64
	// MoveSettle is how many decision ticks in a row a pool must have had
	// capacity before the job moves its checkpoint there. Many runs of
	// capacity last a single tick (a third of us-west-2a's V100 runs), and a
	// move into one pays the egress and the transfer for nothing.
	MoveSettle int
}

// NewGpuq returns gpuq's strategy with the settings measured in the README.
func NewGpuq() Gpuq {
	return Gpuq{Share: 0.2, Margin: 0.5, Settle: 2, PriorRun: time.Hour, Outage: 2, MoveSettle: 2}
}

func (Gpuq) Name() string { return "gpuq" }

func (g Gpuq) Decide(s State) Action {
	if s.Current.Kind == Spot && s.Pools[s.Current.Pool].Available {
		return guard(s, spotIn(s.Current.Pool, "spot pool still available"))
	}
	slack := s.Slack()
	margin := scale(g.Margin, s.Overhead) + s.Tick
	pool := g.pick(s)
	if s.Current.Kind == OnDemand {
		if pool >= 0 && slack-s.startOverhead(Placement{Kind: Spot, Pool: pool}) >= margin &&
			time.Duration(s.Pools[pool].History.Run)*s.Tick >= scale(g.Settle, s.Overhead) {
			return guard(s, spotIn(pool, "spot is back and the restart fits in the slack"))
		}
		return onDemand("on-demand until spot is back for good")
	}
	if pool >= 0 {
		return guard(s, spotIn(pool, "spot available in the pool up longest"))
	}
	if slack > g.reserve(s)+margin {
		return guard(s, wait("no spot capacity, slack above the reserve"))
	}
	a := onDemand("no spot capacity, slack down to the reserve")
	if s.Checkpoint == "" {
		a.Pool = mostUp(s)
	}
	return guard(s, a)
}

// pick returns the available pool to run spot in, or -1: the checkpoint's
// when it has capacity and moving costs something, else the one up longest
// among those settled and worth moving to.
func (g Gpuq) pick(s State) int {
	if s.Move.zero() {
		return longestUp(s)
	}
	home := s.checkpoint()
	if home >= 0 && s.Pools[home].Available {
		return home
	}
	best := -1
	for i, p := range s.Pools {
		if !p.Available || (best >= 0 && p.History.Run <= s.Pools[best].History.Run) {
			continue
		}
		if s.movesFrom(home, i) && (p.History.Run < g.MoveSettle || !g.worthMoving(s, home, i)) {
			continue
		}
		best = i
	}
	return best
}

// worthMoving reports whether a move to pool i pays, the checkpoint being
// in pool home (-1: none yet). The restart and the transfer must leave
// slack. With prices known, the move's egress and its restart on spot must
// cost less than waiting for the checkpoint's pool to come back: nothing
// while the outage it can expect fits in the slack above the reserve (or
// while on-demand, nothing more than staying there), else on-demand for the
// rest of it; and less than what a mean run of capacity in pool i (at most
// the work left) saves over on-demand.
func (g Gpuq) worthMoving(s State, home, i int) bool {
	margin := scale(g.Margin, s.Overhead) + s.Tick
	if s.Slack()-s.Overhead-s.Move.Time < margin {
		return false
	}
	if s.Prices.OnDemand == 0 {
		return true
	}
	spotHour := float64(s.Prices.Spot)
	saveHour := float64(s.Prices.OnDemand - s.Prices.Spot)
	cost := float64(s.Move.Micros) + spotHour*(s.Overhead+s.Move.Time).Hours()
	run := min(g.poolMeanRun(s, i), s.Compute-s.Done)
	if saveHour*run.Hours() <= cost {
		return false
	}
	if home < 0 {
		return true
	}
	outage := scale(g.Outage, expectedOutage(s, home))
	if s.Current.Kind != OnDemand {
		outage -= max(s.Slack()-g.reserve(s)-margin, 0)
	}
	return saveHour*outage.Hours() > cost
}

// expectedOutage is how much longer pool i can be expected to stay without
// capacity: its mean outage so far, or as long again as the current one
// when that is longer (outages are heavy-tailed too).
func expectedOutage(s State, i int) time.Duration {
	h := s.Pools[i].History
	downTicks := h.Ticks - h.UpTicks
	downRuns := max(h.UpRuns, 1)
	mean := time.Duration(downTicks) * s.Tick / time.Duration(downRuns)
	return max(mean, time.Duration(h.Run)*s.Tick)
}

// poolMeanRun is the mean run of capacity of pool i, with PriorRun counted
// as two runs seen before.
func (g Gpuq) poolMeanRun(s State, i int) time.Duration {
	h := s.Pools[i].History
	up := time.Duration(h.UpTicks)*s.Tick + 2*g.PriorRun
	return max(up/time.Duration(h.UpRuns+2), s.Tick)
}

// mostUp returns the pool with the most capacity seen so far: where to start
// on-demand before there is a checkpoint, so that spot later needs no move.
func mostUp(s State) int {
	best := 0
	for i, p := range s.Pools {
		if p.History.UpTicks > s.Pools[best].History.UpTicks {
			best = i
		}
	}
	return best
}

// reserve is the slack kept for restarts to come and for outages late in the
// job, when waiting for spot is no longer an option. Restarts are counted
// over the work left, not the time left: waiting and on-demand are never
// preempted, so a mean run of spot is spent only while the job makes
// progress.
func (g Gpuq) reserve(s State) time.Duration {
	restarts := float64(s.Compute-s.Done) / float64(g.meanRun(s))
	left := float64(s.Compute-s.Done) / float64(s.Compute)
	return scale(restarts, s.Overhead) + scale(g.Share*left, s.Deadline-s.Compute)
}

// meanRun is the mean length of a run of capacity over every pool's history,
// with PriorRun counted as two runs seen before.
func (g Gpuq) meanRun(s State) time.Duration {
	upTicks, upRuns := 0, 0
	for _, p := range s.Pools {
		upTicks += p.History.UpTicks
		upRuns += p.History.UpRuns
	}
	up := time.Duration(upTicks)*s.Tick + 2*g.PriorRun
	return max(up/time.Duration(upRuns+2), s.Tick)
}

func scale(f float64, d time.Duration) time.Duration { return time.Duration(f * float64(d)) }

// longestUp returns the available pool with the longest current run of
// capacity, or -1 when no pool has capacity.
func longestUp(s State) int {
	best := -1
	for i, p := range s.Pools {
		if p.Available && (best < 0 || p.History.Run > s.Pools[best].History.Run) {
			best = i
		}
	}
	return best
}
