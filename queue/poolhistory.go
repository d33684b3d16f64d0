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
// and last ticks were up, and the run it ends with), with the launches,
// refused launches and preemptions counted in it and the latest price.
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
	TailRun     int    `json:"tail_run"`
	Launches    int    `json:"launches"`
	NoCapacity  int    `json:"no_capacity"`
	Preemptions int    `json:"preemptions"`
	PriceMicros int64  `json:"price_micros"`
	Currency    string `json:"currency"`
}

// Merge returns a followed by b, as one bucket spanning both: the same
// summary as if every tick of both had been observed into one.
func (a PoolBucket) Merge(b PoolBucket) PoolBucket {
	out := a
	if out.Pool == "" {
		out.Pool = b.Pool
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
		out.FirstUp, out.LastUp, out.TailRun = b.FirstUp, b.LastUp, b.TailRun
		return out
	}
	out.Ticks += b.Ticks
	out.UpTicks += b.UpTicks
	out.UpRuns += b.UpRuns
	if a.LastUp && b.FirstUp {
		out.UpRuns-- // the run crosses the boundary: counted once
	}
	out.LastUp = b.LastUp
	out.TailRun = b.TailRun
	if b.TailRun == b.Ticks && a.LastUp == b.LastUp {
		out.TailRun += a.TailRun
	}
	return out
}

// Observe adds one tick to the bucket, as the store counts one.
func (a PoolBucket) Observe(up bool) PoolBucket {
	one := PoolBucket{Ticks: 1, FirstUp: up, LastUp: up, TailRun: 1}
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
