package spot

import (
	"fmt"
	"time"
)

// Kind is where a job runs during the next tick.
type Kind uint8

const (
	// Wait holds no instance: no cost, no progress.
	Wait Kind = iota
	// Spot holds an instance of one spot pool; it is preempted when the pool
	// has no capacity left.
	Spot
	// OnDemand holds an on-demand instance, which is never preempted.
	OnDemand
)

func (k Kind) String() string {
	switch k {
	case Spot:
		return "spot"
	case OnDemand:
		return "on-demand"
	default:
		return "wait"
	}
}

// Placement names an instance: a spot pool (by index into State.Pools), the
// on-demand tier, or none.
type Placement struct {
	Kind Kind
	// Pool is the index of the spot pool for Spot. For OnDemand it names the
	// zone only before there is a checkpoint; after, on-demand runs in the
	// checkpoint's zone.
	Pool int
}

func (p Placement) same(q Placement) bool {
	return p.Kind == q.Kind && (p.Kind != Spot || p.Pool == q.Pool)
}

// Action is a strategy's answer for the next tick, with the reason for it.
type Action struct {
	Placement
	Reason string
}

// PoolHistory summarises what has been seen of one spot pool so far. The
// simulator keeps one per pool and calls Observe at each tick; the live
// scheduler reads one per pool from the history every server records in
// PostgreSQL (queue/control StrategyHistory), or without it keeps one per
// pool id and calls Observe at each offer refresh.
type PoolHistory struct {
	// Ticks is the number of ticks observed, UpTicks those with capacity.
	Ticks, UpTicks int
	// UpRuns is the number of runs of consecutive ticks with capacity.
	UpRuns int
	// Run is the length of the current run of ticks in the same state.
	Run int
	// UpSpells and DownSpells count the runs seen to end by their length:
	// [n] those of n+1 ticks (of Spell), the last those of SpellBuckets or
	// more. Left empty (no run seen to end, or counted in another unit), a
	// strategy assumes runs without memory of the mean length.
	UpSpells, DownSpells [SpellBuckets]int32
	// Spell is the tick UpSpells and DownSpells count runs in; zero is the
	// tick the history is observed at (State.Tick). The live scheduler
	// observes pools at every offer refresh and records their runs in
	// spells of its look-ahead's model tick (10 minutes by default).
	Spell time.Duration
	up    bool
}

// SpellBuckets is the number of run lengths PoolHistory tells apart.
const SpellBuckets = 12

// Observe records one more tick.
func (h *PoolHistory) Observe(up bool) {
	if h.Ticks == 0 || up != h.up {
		if h.Ticks > 0 {
			spells := &h.DownSpells
			if h.up {
				spells = &h.UpSpells
			}
			spells[min(h.Run, SpellBuckets)-1]++
		}
		h.Run = 0
		if up {
			h.UpRuns++
		}
	}
	h.Ticks++
	h.Run++
	h.up = up
	if up {
		h.UpTicks++
	}
}

// Pool is one spot pool the job may use: zones or regions inside the job's
// residency class, each with its own capacity.
type Pool struct {
	ID        string
	Available bool
	History   PoolHistory
	// Region is where the pool's checkpoints are stored. Moving a
	// checkpoint between pools of one region (the zones of a cloud region)
	// is a copy inside the region, with no egress, so only a start in
	// another region is a move (State.Move). Empty: the pool is a place of
	// its own, as every pool of a simulation is.
	Region string
}

// State is what a strategy sees at a decision point. Times are relative to
// the job's start.
type State struct {
	Elapsed  time.Duration // time since the job was submitted
	Done     time.Duration // compute done so far (checkpointed progress)
	Compute  time.Duration // compute the job needs in all
	Deadline time.Duration // the job must be done by then
	Overhead time.Duration // progress lost at each (re)start on a new instance
	Tick     time.Duration // time until the next decision point
	Current  Placement     // the instance held now; Wait when none
	Warmup   time.Duration // overhead still to be paid on the current instance
	Pools    []Pool
	// Checkpoint is the ID of the pool whose zone holds the latest
	// checkpoint; empty before an instance has paid its whole overhead.
	// With a Move, a spot start in a pool of another place (another pool,
	// or another region when the pools name theirs) moves the checkpoint
	// there.
	Checkpoint string
	// Move is what such a start costs on top of Overhead; zero when every
	// pool is one place.
	Move Move
	// Prices are what the job pays, when the caller knows them; a strategy
	// weighs a move's egress against them. Zero when unknown.
	Prices Prices
}

// Strategy chooses the placement for the next tick. A strategy other than
// spot-only must keep the job able to finish on on-demand by its deadline.
type Strategy interface {
	Name() string
	Decide(s State) Action
}

// gain is the progress the job makes during the next tick under p.
func (s State) gain(p Placement) time.Duration {
	switch {
	case p.Kind == Wait:
		return 0
	case p.same(s.Current):
		return s.Tick - min(s.Tick, s.Warmup)
	default:
		return s.Tick - min(s.Tick, s.startOverhead(p))
	}
}

// checkpoint is the index of the pool holding the checkpoint, or -1.
func (s State) checkpoint() int {
	if s.Checkpoint == "" {
		return -1
	}
	for i, p := range s.Pools {
		if p.ID == s.Checkpoint {
			return i
		}
	}
	return -1
}

// moves reports whether a spot start in pool i moves the checkpoint: pool i
// is neither the checkpoint's pool nor in its region.
func (s State) moves(i int) bool { return s.movesFrom(s.checkpoint(), i) }

// movesFrom is moves with the checkpoint's pool home (s.checkpoint()) known.
func (s State) movesFrom(home, i int) bool {
	if s.Move.zero() || home < 0 || i == home {
		return false
	}
	region := s.Pools[home].Region
	return region == "" || s.Pools[i].Region != region
}

// startOverhead is the progress a fresh instance under p loses.
func (s State) startOverhead(p Placement) time.Duration {
	if p.Kind == Spot && s.moves(p.Pool) {
		return s.Overhead + s.Move.Time
	}
	return s.Overhead
}

// ticksLeft is the number of whole ticks from now until the deadline.
func (s State) ticksLeft() int64 {
	return int64((s.Deadline - s.Elapsed) / s.Tick)
}

// coldTicks is the number of ticks a fresh on-demand instance needs to
// finish from progress done.
func (s State) coldTicks(done time.Duration) int64 {
	need := s.Compute - done + s.Overhead
	return int64((need + s.Tick - 1) / s.Tick)
}

// Slack is the time the job can still spend without progress (waiting, or
// paying restart overheads) and finish on a fresh on-demand instance in time.
func (s State) Slack() time.Duration {
	return time.Duration(s.ticksLeft()-s.coldTicks(s.Done)) * s.Tick
}

// safe reports whether taking p for the next tick leaves the job able to
// finish by the deadline even if spot capacity never comes back.
func (s State) safe(p Placement) bool {
	if p.Kind == OnDemand && p.same(s.Current) {
		return true
	}
	done := s.Done + s.gain(p)
	if done >= s.Compute {
		return true
	}
	return s.coldTicks(done) <= s.ticksLeft()-1
}

// onDemand is the action that runs on on-demand capacity, keeping the
// current on-demand instance when there is one.
func onDemand(reason string) Action {
	return Action{Placement: Placement{Kind: OnDemand}, Reason: reason}
}

func spotIn(pool int, reason string) Action {
	return Action{Placement: Placement{Kind: Spot, Pool: pool}, Reason: reason}
}

func wait(reason string) Action {
	return Action{Placement: Placement{Kind: Wait}, Reason: reason}
}

// guard is the deadline safety net: it replaces a by on-demand when a would
// leave the job unable to finish in time should spot vanish after this tick.
func guard(s State, a Action) Action {
	if s.safe(a.Placement) {
		return a
	}
	return onDemand("safety net: slack " + s.Slack().String() + " left, on-demand keeps the deadline")
}

// Decision is Advise's answer for the live scheduler: pools by id.
type Decision struct {
	Kind   Kind
	PoolID string // the spot pool to run in; empty unless Kind is Spot
	Reason string
}

// Advise asks st where a job with a deadline should run for the next tick. It
// checks the state first, so that a caller's mistake is an error naming the
// field rather than a wrong placement, and checks that a spot answer names an
// available pool.
func Advise(st Strategy, s State) (Decision, error) {
	if err := s.validate(); err != nil {
		return Decision{}, err
	}
	a := st.Decide(s)
	if a.Kind == Spot {
		if a.Pool < 0 || a.Pool >= len(s.Pools) || !s.Pools[a.Pool].Available {
			return Decision{}, fmt.Errorf("strategy %s chose spot pool %d, which is not available", st.Name(), a.Pool)
		}
		return Decision{Kind: Spot, PoolID: s.Pools[a.Pool].ID, Reason: a.Reason}, nil
	}
	return Decision{Kind: a.Kind, Reason: a.Reason}, nil
}

func (s State) validate() error {
	switch {
	case s.Tick <= 0:
		return fmt.Errorf("state.tick: must be > 0, got %v", s.Tick)
	case s.Compute <= 0:
		return fmt.Errorf("state.compute: must be > 0, got %v", s.Compute)
	case s.Done < 0 || s.Done > s.Compute:
		return fmt.Errorf("state.done: must be within 0–%v, got %v", s.Compute, s.Done)
	case s.Overhead < 0:
		return fmt.Errorf("state.overhead: must be ≥ 0, got %v", s.Overhead)
	case s.Move.Time < 0 || s.Move.Micros < 0:
		return fmt.Errorf("state.move: must not be negative, got %+v", s.Move)
	case s.Prices.OnDemand < 0 || s.Prices.Spot < 0:
		return fmt.Errorf("state.prices: must not be negative, got %+v", s.Prices)
	case s.Warmup < 0 || s.Warmup > s.Overhead+s.Move.Time:
		return fmt.Errorf("state.warmup: must be within 0–%v, got %v", s.Overhead+s.Move.Time, s.Warmup)
	case s.Elapsed < 0 || s.Elapsed > s.Deadline:
		return fmt.Errorf("state.elapsed: must be within 0–%v (the deadline), got %v", s.Deadline, s.Elapsed)
	case s.Current.Kind > OnDemand:
		return fmt.Errorf("state.current.kind: unknown kind %d", s.Current.Kind)
	case s.Current.Kind == Spot && (s.Current.Pool < 0 || s.Current.Pool >= len(s.Pools)):
		return fmt.Errorf("state.current.pool: must index state.pools (%d pools), got %d", len(s.Pools), s.Current.Pool)
	}
	seen := make(map[string]bool, len(s.Pools))
	for i, p := range s.Pools {
		if p.ID == "" {
			return fmt.Errorf("state.pools[%d].id: must not be empty", i)
		}
		if p.History.Spell < 0 {
			return fmt.Errorf("state.pools[%d].history.spell: must not be negative, got %v", i, p.History.Spell)
		}
		if seen[p.ID] {
			return fmt.Errorf("state.pools[%d].id: %q appears twice", i, p.ID)
		}
		seen[p.ID] = true
	}
	if s.Checkpoint != "" && !seen[s.Checkpoint] {
		return fmt.Errorf("state.checkpoint: %q is not one of state.pools", s.Checkpoint)
	}
	return nil
}
