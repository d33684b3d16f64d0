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
	if h := restarted.last().Pools[0].History; h.Ticks != 31 || h.UpTicks != 20 || h.Run != 11 {
		t.Fatalf("the restarted placer saw %+v, want the 30 recorded ticks and its own", h)
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
	if h.Ticks != 12 || h.UpTicks != 8 || h.UpRuns != 2 || h.Run != 2 {
		t.Fatalf("10 s ticks as 5 s ticks: %+v, want 12 ticks, 8 up, 2 runs, a run of 2", h)
	}
}
