package spot

import (
	"math"
	"testing"
	"time"
)

func TestPoolHistoryCountsTheRunsSeenToEndByLength(t *testing.T) {
	t.Parallel()
	// Up 2, down 1, up 15, down 3 (going on, so not counted).
	h := observed(2, 1, 15, 3)
	var up, down [SpellBuckets]int32
	up[1], up[SpellBuckets-1] = 1, 1
	down[0] = 1
	if h.UpSpells != up || h.DownSpells != down {
		t.Fatalf("spells up %v down %v, want up %v down %v", h.UpSpells, h.DownSpells, up, down)
	}
}

func TestSpellHazardsWithoutRunsSeenAreThoseOfRunsWithoutMemory(t *testing.T) {
	t.Parallel()
	h := spellHazards([SpellBuckets]int32{}, 0, 0, 4)
	for a, x := range h {
		if math.Abs(x-0.25) > 1e-9 {
			t.Fatalf("hazard at age %d = %v, want 0.25 (a mean run of 4 ticks)", a+1, x)
		}
	}
}

func TestSpellHazardsFollowTheRunsSeen(t *testing.T) {
	t.Parallel()
	// Forty runs of 3 ticks: one that has lasted 1 or 2 ticks goes on, one
	// that has lasted 3 ends.
	var spells [SpellBuckets]int32
	spells[2] = 40
	h := spellHazards(spells, 120, 0, 3)
	if h[0] > 0.05 || h[1] > 0.05 || h[2] < 0.9 {
		t.Fatalf("hazards %v, want about 0, 0, 1", h[:3])
	}
	// Runs of 12 ticks or more: the last bucket ends at the rate of their
	// mean, 30 ticks here (19 more after the 12th on average).
	spells = [SpellBuckets]int32{}
	spells[SpellBuckets-1] = 10
	h = spellHazards(spells, 300, 0, 30)
	if got := h[SpellBuckets-1]; got < 1.0/21 || got > 1.0/17 {
		t.Fatalf("hazard of the long runs = %v, want about 1/19", got)
	}
}

// lookaheadState is a job on one pool with 10-minute ticks and a 12-minute
// restart overhead, at handPrices: 8 hours of work left.
func lookaheadState(slack time.Duration, current Kind, p Pool) State {
	return State{
		Elapsed: 2 * time.Hour, Done: 2 * time.Hour, Compute: 10 * time.Hour,
		Deadline: 10*time.Hour + 12*time.Minute + slack,
		Overhead: 12 * time.Minute, Tick: 10 * time.Minute, Current: Placement{Kind: current},
		Pools: []Pool{p}, Prices: handPrices,
	}
}

func TestLookAheadTableCostsLessWithMoreSlackAndMoreWithMoreWork(t *testing.T) {
	t.Parallel()
	s := lookaheadState(time.Hour, Wait, Pool{ID: "a", History: observed(repeat(20, 30, 6)...)})
	k := poolModel(s, 0, time.Hour)
	tb := k.build(60, 40)
	for x := range situations {
		for a := 1; a <= spellAges; a++ {
			for w := 1; w <= 60; w++ {
				for sl := 0; sl <= 40; sl++ {
					v := tb.at(w, sl, x, a)
					if sl > 0 && v > tb.at(w, sl-1, x, a)+tie(v) {
						t.Fatalf("situation %d age %d work %d: slack %d costs %v, more than %v with one tick less", x, a, w, sl, v, tb.at(w, sl-1, x, a))
					}
					if v+tie(v) < tb.at(w-1, sl, x, a) {
						t.Fatalf("situation %d age %d slack %d: work %d costs %v, less than %v with one tick less", x, a, sl, w, v, tb.at(w-1, sl, x, a))
					}
				}
			}
		}
	}
	// Without slack, an outage is on-demand to the end: every tick of work
	// at on-demand prices if the pool never came back.
	k.down = hazards{}
	tb = k.build(60, 40)
	if got, want := tb.at(48, 0, onDemandDn, 1), 48*k.odTick; math.Abs(got-want) > tie(want) {
		t.Fatalf("48 ticks on on-demand cost %v, want %v", got, want)
	}
}

func TestLookAheadWaitsOutOutagesThatEndSoonAndRunsOnDemandThroughThoseThatLast(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		history PoolHistory
		want    Kind
	}{
		{"outages of one tick", observed(append(repeat(30, 20, 1), 20, 1)...), Wait},
		{"outages of eight hours", observed(append(repeat(4, 20, 48), 20, 1)...), OnDemand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := lookaheadState(40*time.Minute, Wait, Pool{ID: "a", History: tt.history})
			if got := NewLookAhead().Decide(s); got.Kind != tt.want {
				t.Errorf("Decide = %v (%s), want %v", got.Kind, got.Reason, tt.want)
			}
		})
	}
}

func TestLookAheadLeavesOnDemandOnlyForAPoolExpectedToStayUp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		history PoolHistory
		want    Kind
	}{
		{"runs of one tick", observed(append(repeat(30, 1, 5), 1)...), OnDemand},
		{"runs of a day", observed(append(repeat(3, 144, 5), 1)...), Spot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := lookaheadState(2*time.Hour, OnDemand, Pool{ID: "a", Available: true, History: tt.history})
			if got := NewLookAhead().Decide(s); got.Kind != tt.want {
				t.Errorf("Decide = %v (%s), want %v", got.Kind, got.Reason, tt.want)
			}
		})
	}
}

func TestLookAheadFallsBackToGpuqsRuleWithoutPrices(t *testing.T) {
	t.Parallel()
	s := lookaheadState(40*time.Minute, Wait, Pool{ID: "a", History: observed(repeat(4, 20, 48)...)})
	s.Prices = Prices{}
	if got, want := NewLookAhead().Decide(s), NewGpuq().Decide(s); got != want {
		t.Fatalf("Decide = %+v, want gpuq's %+v", got, want)
	}
}

// The live scheduler decides every 10 s on pools whose runs it recorded in
// 10-minute spells: the look-ahead decides as on the same history observed
// at a 10-minute tick, not by gpuq's rule (8 hours of work are 2,880 ticks
// of 10 s, beyond any table).
func TestLookAheadDecidesAtTheTickTheRunsWereRecordedIn(t *testing.T) {
	t.Parallel()
	live := func(h PoolHistory) PoolHistory {
		const n = 60 // 10-second ticks in 10 minutes
		return PoolHistory{Ticks: h.Ticks * n, UpTicks: h.UpTicks * n, UpRuns: h.UpRuns, Run: h.Run * n,
			UpSpells: h.UpSpells, DownSpells: h.DownSpells, Spell: 10 * time.Minute, up: h.up}
	}
	for _, tt := range []struct {
		name    string
		history PoolHistory
		want    Kind
	}{
		{"outages of one tick", observed(append(repeat(30, 20, 1), 20, 1)...), Wait},
		{"outages of eight hours", observed(append(repeat(4, 20, 48), 20, 1)...), OnDemand},
	} {
		model := lookaheadState(40*time.Minute, Wait, Pool{ID: "a", History: tt.history})
		s := model
		s.Tick = 10 * time.Second
		s.Pools = []Pool{{ID: "a", History: live(tt.history)}}
		got, want := NewLookAhead().Decide(s), NewLookAhead().Decide(model)
		if got != want || got.Kind != tt.want {
			t.Errorf("%s: Decide at 10 s = %v (%s), at 10 min %v (%s); want %v", tt.name, got.Kind, got.Reason, want.Kind, want.Reason, tt.want)
		}
		// Without the spells' tick, the 10-second state is beyond the
		// table and gets gpuq's rule.
		s.Pools[0].History.Spell = 0
		if got, rule := NewLookAhead().Decide(s), NewGpuq().Decide(s); got != rule {
			t.Errorf("%s: without Spell, Decide = %+v, want gpuq's %+v", tt.name, got, rule)
		}
	}
}
