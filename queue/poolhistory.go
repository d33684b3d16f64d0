package queue

import "time"

// PoolObservation is one look at a pool: whether it had capacity, and the
// price it was offered at (empty Currency: price unknown).
type PoolObservation struct {
	Pool        string
	Up          bool
	PriceMicros int64
	Currency    string
}

// Kinds of PoolEvent.
const (
	// PoolLaunched is a launch in the pool that succeeded: it was up.
	PoolLaunched = "launched"
	// PoolNoCapacity is a launch refused for lack of capacity: it was down.
	PoolNoCapacity = "no-capacity"
	// PoolPreempted is an instance of the pool reclaimed by its provider,
	// with or without a notice: it went down.
	PoolPreempted = "preempted"
)

// PoolEvent is something that happened to a pool's capacity other than an
// offer refresh: a launch, a refused launch, a preemption.
type PoolEvent struct {
	Pool string
	Kind string
	At   time.Time
}

// Up reports what the event says of the pool's capacity.
func (e PoolEvent) Up() bool { return e.Kind == PoolLaunched }

// PoolBucket is a pool's availability over one span of time: the ticks it
// was observed up or down, and enough of their order to merge neighbouring
// buckets exactly (the runs of capacity that start in it, whether its first
// and last ticks were up, the runs it starts and ends with, and the lengths
// of the runs that begin and end inside it), with the launches, refused
// launches and preemptions counted in it and the latest price.
type PoolBucket struct {
	Pool  string        `json:"pool"`
	Start time.Time     `json:"start"`
	Width time.Duration `json:"width"`
	// Ticks is the number of observations, UpTicks those with capacity.
	Ticks   int `json:"ticks"`
	UpTicks int `json:"up_ticks"`
	// UpRuns is the number of runs of consecutive up ticks starting here.
	UpRuns  int  `json:"up_runs"`
	FirstUp bool `json:"first_up"`
	LastUp  bool `json:"last_up"`
	// TailRun is the length in ticks of the run the bucket ends with.
	TailRun int `json:"tail_run"`
	// HeadRun is the length in ticks of the run the bucket starts with: all
	// its ticks when it holds a single run.
	HeadRun int `json:"head_run"`
	// UpSpells and DownSpells count the runs of capacity and of none that
	// begin and end inside the bucket by their length in spells of
	// SpellTicks ticks, rounded: [n] those of n+1 spells (a run shorter
	// than half a spell counts as one), the last those of PoolSpellBuckets
	// or more. They are the spot strategy's run lengths (spot.PoolHistory),
	// counted at the tick of its model rather than of the observations.
	UpSpells   [PoolSpellBuckets]int32 `json:"up_spells"`
	DownSpells [PoolSpellBuckets]int32 `json:"down_spells"`
	// SpellTicks is the ticks in one spell; 0 counts as 1. The buckets of a
	// history share it (the store's setting).
	SpellTicks  int    `json:"spell_ticks"`
	Launches    int    `json:"launches"`
	NoCapacity  int    `json:"no_capacity"`
	Preemptions int    `json:"preemptions"`
	PriceMicros int64  `json:"price_micros"`
	Currency    string `json:"currency"`
}

// PoolSpellBuckets is the number of run lengths a bucket tells apart, as
// many as the spot strategy's spot.SpellBuckets.
const PoolSpellBuckets = 12

// Merge returns a followed by b, as one bucket spanning both: the same
// summary as if every tick of both had been observed into one.
func (a PoolBucket) Merge(b PoolBucket) PoolBucket {
	out := a
	if out.Pool == "" {
		out.Pool = b.Pool
	}
	if out.SpellTicks == 0 {
		out.SpellTicks = b.SpellTicks
	}
	if a.Start.IsZero() {
		out.Start = b.Start
	}
	if end := b.Start.Add(b.Width); end.After(out.Start.Add(out.Width)) {
		out.Width = end.Sub(out.Start)
	}
	out.Launches += b.Launches
	out.NoCapacity += b.NoCapacity
	out.Preemptions += b.Preemptions
	if b.Currency != "" {
		out.PriceMicros, out.Currency = b.PriceMicros, b.Currency
	}
	switch {
	case b.Ticks == 0:
		return out
	case a.Ticks == 0:
		out.Ticks, out.UpTicks, out.UpRuns = b.Ticks, b.UpTicks, b.UpRuns
		out.FirstUp, out.LastUp, out.TailRun, out.HeadRun = b.FirstUp, b.LastUp, b.TailRun, b.HeadRun
		out.UpSpells, out.DownSpells = b.UpSpells, b.DownSpells
		return out
	}
	out.Ticks += b.Ticks
	out.UpTicks += b.UpTicks
	out.UpRuns += b.UpRuns
	for i := range out.UpSpells {
		out.UpSpells[i] += b.UpSpells[i]
		out.DownSpells[i] += b.DownSpells[i]
	}
	// The runs at the boundary: a's last and b's first, one run when they
	// are in the same state. A run is a spell once both its ends are inside
	// the merged bucket; a's first run stays its head.
	aOne, bOne := a.TailRun == a.Ticks, b.HeadRun == b.Ticks
	if a.LastUp == b.FirstUp {
		if a.LastUp {
			out.UpRuns-- // the run crosses the boundary: counted once
		}
		run := a.TailRun + b.HeadRun
		switch {
		case aOne:
			out.HeadRun = run
		case !bOne:
			out.countSpell(a.LastUp, run)
		}
	} else {
		if !aOne {
			out.countSpell(a.LastUp, a.TailRun)
		}
		if !bOne {
			out.countSpell(b.FirstUp, b.HeadRun)
		}
	}
	out.LastUp = b.LastUp
	out.TailRun = b.TailRun
	if bOne && a.LastUp == b.LastUp {
		out.TailRun += a.TailRun
	}
	return out
}

// SpellOf is the index into UpSpells or DownSpells of a run of ticks ticks,
// in spells of spellTicks ticks (0 counts as 1).
func SpellOf(ticks, spellTicks int) int {
	unit := max(spellTicks, 1)
	return min(max((ticks+unit/2)/unit, 1), PoolSpellBuckets) - 1
}

func (a *PoolBucket) countSpell(up bool, ticks int) {
	spells := &a.DownSpells
	if up {
		spells = &a.UpSpells
	}
	spells[SpellOf(ticks, a.SpellTicks)]++
}

// Spells is UpSpells and DownSpells with the bucket's first run counted as
// well when it has ended: the lengths of every run seen to end, as the spot
// strategy's history counts them when it observes every tick from the
// first.
func (a PoolBucket) Spells() (up, down [PoolSpellBuckets]int32) {
	b := a
	if a.Ticks > 0 && a.HeadRun < a.Ticks {
		b.countSpell(a.FirstUp, a.HeadRun)
	}
	return b.UpSpells, b.DownSpells
}

// Observe adds one tick to the bucket, as the store counts one.
func (a PoolBucket) Observe(up bool) PoolBucket {
	one := PoolBucket{Ticks: 1, FirstUp: up, LastUp: up, TailRun: 1, HeadRun: 1, SpellTicks: a.SpellTicks}
	if up {
		one.UpTicks, one.UpRuns = 1, 1
	}
	w := a.Width
	out := a.Merge(one)
	out.Start, out.Width = a.Start, w
	return out
}

// Availability is the share of observed ticks the pool was up; 0 when
// none was observed.
func (a PoolBucket) Availability() float64 {
	if a.Ticks == 0 {
		return 0
	}
	return float64(a.UpTicks) / float64(a.Ticks)
}

// PreemptionsPerHour is the bucket's preemptions over its span.
func (a PoolBucket) PreemptionsPerHour() float64 {
	if a.Width <= 0 {
		return 0
	}
	return float64(a.Preemptions) / a.Width.Hours()
}
