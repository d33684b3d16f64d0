package control_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/policy/spot"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
)

// seenStates is a spot strategy that records the states it is asked about
// and waits for spot.
type seenStates struct {
	mu     sync.Mutex
	states []spot.State
}

func (*seenStates) Name() string { return "seen" }

func (s *seenStates) Decide(st spot.State) spot.Action {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states = append(s.states, st)
	return spot.Action{Placement: spot.Placement{Kind: spot.Wait}, Reason: "recorded"}
}

func (s *seenStates) last() spot.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.states[len(s.states)-1]
}

// switchable offers one spot pool whose availability the test sets.
type switchable struct {
	mu sync.Mutex
	up bool
}

func (*switchable) Name() string { return "switchable" }

func (s *switchable) Offers(context.Context) ([]policy.Offer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	avail := policy.Unavailable
	if s.up {
		avail = policy.Available
	}
	return []policy.Offer{
		{Provider: "sim", Pool: "sim-a-spot", Region: "eu-1", Country: "DE", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: policy.TierSpot,
			PricePerHour: policy.Money{Micros: 300_000, Currency: "EUR"}, Availability: avail},
		{Provider: "sim", Pool: "sim-a-od", Region: "eu-1", Country: "DE", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: policy.TierOnDemand,
			PricePerHour: policy.Money{Micros: 1_000_000, Currency: "EUR"}, Availability: policy.Available},
	}, nil
}

func (s *switchable) set(up bool) {
	s.mu.Lock()
	s.up = up
	s.mu.Unlock()
}

// A placer that restarts, or a second one, reads the availability every
// placer recorded in PostgreSQL; without the store it starts blind.
func TestARestartedPlacerReadsThePoolHistoryRecordedBeforeIt(t *testing.T) {
	t.Parallel()
	s, _ := queuetest.Store(t, nil)
	offers := &switchable{up: true}
	t0 := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	clock := t0
	now := func() time.Time { return clock }
	spec := mustSpec(t, "command: [/bin/true]\nplacement: {tier: spot-then-on-demand}\nexpected_duration: 1h\ndeadline: "+
		t0.Add(4*time.Hour).Format(time.RFC3339)+"\n")
	job := &queue.Job{ID: uuid.New(), Spec: spec, SubmittedAt: t0}
	// The clock moves one offer TTL per placement: each refreshes the offers.
	newPlacer := func(st spot.Strategy, recorded bool) *control.PolicyPlacer {
		p := &control.PolicyPlacer{Sources: []adapters.OfferSource{offers}, OfferTTL: 10 * time.Second, Strategy: st, Now: now}
		if recorded {
			p.History = s
		}
		return p
	}
	first := &seenStates{}
	p1 := newPlacer(first, true)
	for i := range 30 {
		offers.set(i < 20) // up 20 ticks, then down 10
		place(t, p1, job)
		clock = clock.Add(10 * time.Second)
	}
	if h := first.last().Pools[0].History; h.Ticks != 30 || h.UpTicks != 20 || h.UpRuns != 1 || h.Run != 10 {
		t.Fatalf("the first placer saw %+v, want 30 ticks, 20 up in one run, down for the last 10", h)
	}

	restarted, blind := &seenStates{}, &seenStates{}
	for _, c := range []struct {
		st       *seenStates
		recorded bool
	}{{restarted, true}, {blind, false}} {
		place(t, newPlacer(c.st, c.recorded), job)
	}
	// The run of capacity that ended, 200 s, is one 10-minute spell: the
	// look-ahead's model reads the runs in spells.
	if h := restarted.last().Pools[0].History; h.Ticks != 31 || h.UpTicks != 20 || h.Run != 11 ||
		h.Spell != 10*time.Minute || h.UpSpells != [spot.SpellBuckets]int32{0: 1} {
		t.Fatalf("the restarted placer saw %+v, want the 30 recorded ticks and its own, and the run that ended", h)
	}
	if h := blind.last().Pools[0].History; h.Ticks != 1 {
		t.Fatalf("a placer without the store saw %+v, want only its own tick", h)
	}
}

// place places job; a refusal (spot down and the strategy waiting for it)
// is an answer too.
func place(t *testing.T, p *control.PolicyPlacer, job *queue.Job) {
	t.Helper()
	var rej *queue.RejectionError
	if _, err := p.Place(context.Background(), job, nil); err != nil && !errors.As(err, &rej) {
		t.Fatal(err)
	}
}

func TestStrategyHistoryScalesRecordedTicksToThePlacersTick(t *testing.T) {
	t.Parallel()
	b := queue.PoolBucket{Ticks: 6, UpTicks: 4, UpRuns: 2, TailRun: 1, LastUp: true}
	h := control.StrategyHistory(b, 10*time.Second, 5*time.Second)
	if h.Ticks != 12 || h.UpTicks != 8 || h.UpRuns != 2 || h.Run != 2 || h.Spell != 10*time.Second {
		t.Fatalf("10 s ticks as 5 s ticks: %+v, want 12 ticks, 8 up, 2 runs, a run of 2, runs counted in 10 s", h)
	}
}

// The runs recorded in spells keep their unit, and the first run of the
// history counts once it has ended, as a history observing every tick
// counts it.
func TestStrategyHistoryKeepsTheRunsInTheSpellsTheyWereRecordedIn(t *testing.T) {
	t.Parallel()
	b := queue.PoolBucket{SpellTicks: 60}
	for _, run := range []struct {
		up    bool
		ticks int
	}{{true, 130}, {false, 60}, {true, 700}, {false, 20}} {
		for range run.ticks {
			b = b.Observe(run.up)
		}
	}
	h := control.StrategyHistory(b, 10*time.Second, 10*time.Second)
	var up, down [spot.SpellBuckets]int32
	up[1], up[11], down[0] = 1, 1, 1 // 130 ticks are 2 spells of 10 minutes, 700 ticks 12
	if h.Spell != 10*time.Minute || h.UpSpells != up || h.DownSpells != down || h.Run != 20 {
		t.Fatalf("history %+v; want spells of 10m, up %v, down %v and a run of 20 going on", h, up, down)
	}
}

// told is a spot strategy that records the actions of the one it wraps.
type told struct {
	spot.Strategy
	mu      sync.Mutex
	actions []spot.Action
}

func (s *told) Decide(st spot.State) spot.Action {
	a := s.Strategy.Decide(st)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.actions = append(s.actions, a)
	return a
}

// The placer's default strategy is the look-ahead, modelling the pool from
// the run lengths recorded in PostgreSQL, at its own 10-minute tick (an
// 8-hour job is beyond its table in ticks of the placer's 10 s). Two pools
// up the same share of the time, in runs of the same lengths, with outages
// of the same mean, 30 minutes; each has been down for 30 minutes now.
// Where every outage lasted 30 minutes, capacity is due: the job waits for
// it. Where outages lasted 10 minutes or 50, this one is a long one: the
// job goes to on-demand. A model without the run lengths sees the two
// pools alike.
func TestThePlacersLookAheadWaitsOrGoesOnDemandByTheRecordedRunLengths(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		runs    []int // the pool's past, in 10-minute ticks: up, down, up, down
		advises string
	}{
		{"outages of 30 minutes", []int{20, 3, 20, 3}, "the look-ahead expects waiting to cost less than on-demand"},
		{"outages of 10 or 50 minutes", []int{20, 1, 20, 5}, "the look-ahead expects on-demand to cost less than waiting"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, _ := queuetest.Store(t, nil)
			// Observations 10 minutes apart keep the test short; runs are
			// counted in 10-minute spells, as with the default retention.
			s.HistoryRetention = store.PoolHistoryRetention{Tick: 10 * time.Minute, Fine: 10 * time.Minute}
			at := t0
			observe := func(up bool, n int) {
				for range n {
					if err := s.ObservePools(context.Background(), at, []queue.PoolObservation{{Pool: "sim-a-spot", Up: up}}); err != nil {
						t.Fatal(err)
					}
					at = at.Add(10 * time.Minute)
				}
			}
			for range 8 {
				for i, n := range c.runs {
					observe(i%2 == 0, n)
				}
			}
			observe(true, 20)
			observe(false, 2) // the placer's refresh observes the third
			now := at
			spec := mustSpec(t, "command: [/bin/true]\nplacement: {tier: spot-then-on-demand}\nexpected_duration: 8h\ndeadline: "+
				now.Add(8*time.Hour+10*time.Minute+40*time.Minute).Format(time.RFC3339)+"\n")
			job := &queue.Job{ID: uuid.New(), Spec: spec, SubmittedAt: now}
			p := &control.PolicyPlacer{Sources: []adapters.OfferSource{&switchable{}}, History: s, Now: func() time.Time { return now }}
			st := &told{Strategy: p.WithDefaults().Strategy}
			p.Strategy = st
			place(t, p, job)
			if len(st.actions) != 1 || st.actions[0].Reason != "no spot capacity; "+c.advises {
				t.Fatalf("the %s strategy's actions %+v; want one, %q", st.Name(), st.actions, c.advises)
			}
		})
	}
}
