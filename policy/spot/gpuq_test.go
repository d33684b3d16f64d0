package spot

import (
	"testing"
	"time"
)

// firstState records the state of the first decision and then waits.
type firstState struct{ got *State }

func (firstState) Name() string { return "first-state" }

func (f firstState) Decide(s State) Action {
	if f.got.Tick == 0 {
		*f.got = s
		f.got.Pools = append([]Pool(nil), s.Pools...)
	}
	return wait("")
}

func TestSimulateStartsThePoolHistoryWithTheTraceBeforeTheStart(t *testing.T) {
	t.Parallel()
	traces := []Trace{trace("a", time.Minute, 1, 1, 0, 1, 1, 1), trace("b", time.Minute, 0, 0, 0, 0, 1, 1)}
	var got State
	if _, err := Simulate(traces, Job{Compute: time.Minute, Deadline: 2 * time.Minute, Start: 3 * time.Minute}, handPrices, firstState{&got}); err != nil {
		t.Fatal(err)
	}
	// Ticks 0–2 before the start, tick 3 observed at the first decision.
	want := []PoolHistory{{Ticks: 4, UpTicks: 3, UpRuns: 2, Run: 1}, {Ticks: 4, Run: 4}}
	for i, w := range want {
		h := got.Pools[i].History
		if h.Ticks != w.Ticks || h.UpTicks != w.UpTicks || h.UpRuns != w.UpRuns || h.Run != w.Run {
			t.Errorf("pool %s history = %+v, want %+v", got.Pools[i].ID, h, w)
		}
	}
}

// observed is the history of a pool that was up and down in runs of the
// given lengths, the first one up.
func observed(runs ...int) PoolHistory {
	var h PoolHistory
	for i, n := range runs {
		for range n {
			h.Observe(i%2 == 0)
		}
	}
	return h
}

// repeat returns runs repeated n times.
func repeat(n int, runs ...int) []int {
	var out []int
	for range n {
		out = append(out, runs...)
	}
	return out
}

func TestGpuqLeavesOnDemandOnlyForAPoolThatHasSettled(t *testing.T) {
	t.Parallel()
	// d is 12 minutes and Settle 2: a pool must have been up 24 one-minute ticks.
	tests := []struct {
		name string
		up   int
		want Kind
	}{
		{"back for a tick", 1, OnDemand},
		{"back for one overhead", 12, OnDemand},
		{"one tick short", 23, OnDemand},
		{"back for two overheads", 24, Spot},
		{"back for hours", 300, Spot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := State{
				Elapsed: 4 * time.Hour, Done: 3 * time.Hour, Compute: 20 * time.Hour, Deadline: 30 * time.Hour,
				Overhead: 12 * time.Minute, Tick: time.Minute, Current: Placement{Kind: OnDemand},
				Pools: []Pool{{ID: "a", Available: true, History: observed(600, 60, tt.up)}},
			}
			if got := NewGpuq().Decide(s); got.Kind != tt.want {
				t.Errorf("Decide = %v (%s), want %v", got.Kind, got.Reason, tt.want)
			}
		})
	}
}

func TestGpuqWaitsThroughAnOutageOnlyWhenThePoolsHaveHeldLong(t *testing.T) {
	t.Parallel()
	// 10 hours left for 8 hours of work: 108 minutes of slack. The reserve
	// keeps 38 minutes for late outages plus one 12-minute overhead for each
	// mean run in the 8 hours of work left: 15 minutes with ten-hour runs
	// (the prior counted), 96 with the prior run of an hour, hundreds of
	// hours with two-minute runs.
	tests := []struct {
		name    string
		history PoolHistory
		want    Kind
	}{
		{"no history: the prior run of an hour", PoolHistory{}, OnDemand},
		{"runs of ten hours", observed(append(repeat(3, 600, 60), 30)...), Wait},
		{"runs of two minutes", observed(append(repeat(150, 2, 2), 30)...), OnDemand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := State{
				Elapsed: 4 * time.Hour, Done: 2 * time.Hour, Compute: 10 * time.Hour, Deadline: 14 * time.Hour,
				Overhead: 12 * time.Minute, Tick: time.Minute,
				Pools: []Pool{{ID: "a", History: tt.history}},
			}
			if got := NewGpuq().Decide(s); got.Kind != tt.want {
				t.Errorf("Decide = %v (%s), want %v; reserve %v, slack %v", got.Kind, got.Reason, tt.want, NewGpuq().reserve(s), s.Slack())
			}
		})
	}
}

func TestGpuqMovesToAnotherPoolOnlyWhenTheMovePays(t *testing.T) {
	t.Parallel()
	// The checkpoint is in pool a, whose outages last 45 minutes on average
	// (it has been down for 30). Pool b's runs of capacity last about ten
	// hours. A move costs its egress plus 18 minutes of spot.
	long := observed(append(repeat(3, 600, 60), 30)...)
	tests := []struct {
		name   string
		aUp    bool
		egress int64
		slack  time.Duration
		want   Kind
		wantIn string
	}{
		{"the checkpoint's pool is up: stay in its zone", true, 500_000, 10 * time.Hour, Spot, "a"},
		{"a's outage fits in the slack: wait for it", false, 500_000, 10 * time.Hour, Wait, ""},
		{"it does not: move to b", false, 500_000, 70 * time.Minute, Spot, "b"},
		{"egress dearer than on-demand through the outage: no move", false, 5_000_000, 70 * time.Minute, Wait, ""},
		{"the transfer does not fit the slack: no move", false, 500_000, 20 * time.Minute, OnDemand, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := Pool{ID: "a", History: observed(600, 60, 600, 30)}
			if tt.aUp {
				a = Pool{ID: "a", Available: true, History: observed(600, 60, 600)}
			}
			s := State{
				Elapsed: 4 * time.Hour, Done: 2 * time.Hour, Compute: 10 * time.Hour, Deadline: 4*time.Hour + 8*time.Hour + tt.slack,
				Overhead: 12 * time.Minute, Tick: time.Minute,
				Pools:      []Pool{a, {ID: "b", Available: true, History: long}},
				Checkpoint: "a",
				Move:       Move{Micros: tt.egress, Time: 6 * time.Minute},
				Prices:     Prices{OnDemand: 3_060_000, Spot: 920_000, Currency: "USD"},
			}
			got := NewGpuq().Decide(s)
			if got.Kind != tt.want || (got.Kind == Spot && s.Pools[got.Pool].ID != tt.wantIn) {
				t.Errorf("Decide = %v in pool %d (%s), want %v %s", got.Kind, got.Pool, got.Reason, tt.want, tt.wantIn)
			}
		})
	}
}

func TestGpuqCountsTheRestartsToComeOverTheWorkLeftNotTheTimeLeft(t *testing.T) {
	t.Parallel()
	// 8 h 10 min left for 5 h of work: 2 h 50 min of slack. With no history
	// a mean run is the prior hour, so the reserve keeps five 15-minute
	// overheads for the 5 hours of work, plus an hour (a fifth of the 10
	// hours of initial slack, halved with half the work left): 2 h 15 min,
	// under the slack, so the job waits. Counted over the 8 hours left,
	// the restarts alone would take 2 hours and send it to on-demand, though
	// waiting and on-demand are never preempted.
	s := State{
		Elapsed: 11*time.Hour + 50*time.Minute, Done: 5 * time.Hour, Compute: 10 * time.Hour, Deadline: 20 * time.Hour,
		Overhead: 15 * time.Minute, Tick: 10 * time.Minute,
		Pools: []Pool{{ID: "a"}},
	}
	g := NewGpuq()
	if r := g.reserve(s); r != 2*time.Hour+15*time.Minute {
		t.Errorf("reserve = %v, want 2h15m", r)
	}
	if got := g.Decide(s); got.Kind != Wait {
		t.Errorf("Decide = %v (%s), want wait; slack %v, reserve %v", got.Kind, got.Reason, s.Slack(), g.reserve(s))
	}
}

func TestGpuqWeighsTheOutageOfTheCheckpointsPoolTwiceAgainstAMove(t *testing.T) {
	t.Parallel()
	// Pool a holds the checkpoint and has been down 30 minutes; its outages
	// last 45 minutes on average. The slack above the reserve is about
	// 45 minutes: it would just absorb one mean outage, so counted once
	// waiting looks free. Counted twice, 45 minutes of on-demand are at
	// stake, more than the move (0.50 USD and 18 minutes of spot) costs.
	s := State{
		Elapsed: 4 * time.Hour, Done: 2 * time.Hour, Compute: 10 * time.Hour, Deadline: 14 * time.Hour,
		Overhead: 12 * time.Minute, Tick: time.Minute,
		Pools: []Pool{
			{ID: "a", History: observed(600, 60, 600, 30)},
			{ID: "b", Available: true, History: observed(append(repeat(3, 600, 60), 30)...)},
		},
		Checkpoint: "a",
		Move:       Move{Micros: 500_000, Time: 6 * time.Minute},
		Prices:     Prices{OnDemand: 3_060_000, Spot: 920_000, Currency: "USD"},
	}
	g := NewGpuq()
	if got := g.Decide(s); got.Kind != Spot || s.Pools[got.Pool].ID != "b" {
		t.Errorf("Decide = %v in pool %d (%s), want spot in b; slack %v, reserve %v", got.Kind, got.Pool, got.Reason, s.Slack(), g.reserve(s))
	}
	g.Outage = 1
	if got := g.Decide(s); got.Kind != Wait {
		t.Errorf("with the outage counted once, Decide = %v (%s), want wait", got.Kind, got.Reason)
	}
}

func TestGpuqMovesOnlyIntoAPoolThatHasHeldCapacityForTwoTicks(t *testing.T) {
	t.Parallel()
	// Pool a holds the checkpoint and has been down for an hour, with a few
	// minutes of slack above the reserve: a move to b pays, once b has had
	// capacity for MoveSettle (2) ticks; a pool back for one tick has not
	// shown it will hold. A pool of the checkpoint's own region is no move
	// (its checkpoint is copied inside the region, with no egress): with the
	// slack down to the reserve, gpuq takes its spot at once, where it runs
	// on-demand rather than move to another region's pool that has not
	// settled.
	for _, tt := range []struct {
		name              string
		deadline          time.Duration
		aRegion, bRegion  string
		bUp               int
		want              Kind
		moved, movesThere bool
	}{
		{"b back for one tick: no move", 12*time.Hour + 70*time.Minute, "", "", 1, Wait, false, true},
		{"b up for two ticks: move", 12*time.Hour + 70*time.Minute, "", "", 2, Spot, true, true},
		{"slack at the reserve, b in another region: on-demand", 12*time.Hour + 20*time.Minute, "us-west-2", "us-west-1", 1, OnDemand, false, true},
		{"slack at the reserve, b in a's region: spot in b", 12*time.Hour + 20*time.Minute, "us-west-2", "us-west-2", 1, Spot, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := outageOfTheCheckpointsPool(tt.deadline, tt.aRegion, tt.bRegion, tt.bUp)
			got := NewGpuq().Decide(s)
			if moved := got.Kind == Spot && s.Pools[got.Pool].ID == "b"; got.Kind != tt.want || moved != tt.moved {
				t.Errorf("Decide = %v in pool %d (%s), want %v (in b: %v); slack %v, reserve %v", got.Kind, got.Pool, got.Reason, tt.want, tt.moved, s.Slack(), NewGpuq().reserve(s))
			}
			if s.moves(1) != tt.movesThere {
				t.Errorf("moves(b) = %v with b in %q and the checkpoint in %q, want %v", s.moves(1), tt.bRegion, tt.aRegion, tt.movesThere)
			}
		})
	}
}

// outageOfTheCheckpointsPool is a job 4 hours in, 2 of its 10 hours done,
// whose checkpoint's pool a (in aRegion) has been down for an hour after
// two runs of 10 hours up, while pool b (in bRegion) had three such runs,
// each followed by an hour down, and now has had capacity for bUp ticks of a
// minute. A move costs 0.50 USD and 6 minutes on top of the 12-minute
// restart.
func outageOfTheCheckpointsPool(deadline time.Duration, aRegion, bRegion string, bUp int) State {
	return State{
		Elapsed: 4 * time.Hour, Done: 2 * time.Hour, Compute: 10 * time.Hour, Deadline: deadline,
		Overhead: 12 * time.Minute, Tick: time.Minute,
		Pools: []Pool{
			{ID: "a", Region: aRegion, History: observed(600, 60, 600, 60)},
			{ID: "b", Region: bRegion, Available: true, History: observed(append(repeat(3, 600, 60), bUp)...)},
		},
		Checkpoint: "a",
		Move:       Move{Micros: 500_000, Time: 6 * time.Minute},
		Prices:     Prices{OnDemand: 3_060_000, Spot: 920_000, Currency: "USD"},
	}
}
