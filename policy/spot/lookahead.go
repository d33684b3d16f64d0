package spot

import (
	"math"
	"sync"
	"time"
)

// LookAhead is gpuq's strategy with its two waiting decisions taken by a
// look-ahead instead of by the reserve: when no pool it would run in has
// capacity, whether to wait or run on-demand, and, on on-demand, whether to
// leave for spot in the pool it would pick. Each is the choice of lower
// expected cost in a value table of a model of the pool learnt from its
// past alone: runs of capacity and of none whose chance of ending after a
// tick depends on how long they have lasted (read from the lengths of the
// runs the pool was seen to end, PoolHistory.UpSpells and DownSpells, with
// a prior of runs without memory of the mean length; runs are heavy-tailed,
// so that a pool up for long tends to stay up and an outage that has lasted
// tends to last). The table is a dynamic programme over work and slack left
// and the pool's state and its age, with the true costs: the restart
// overhead on either tier, on-demand over spot for every tick of work, and
// waiting as slack spent. Everything else is Gpuq's: the pool it picks,
// moves between pools and the shared safety net.
//
// A table is built once for each model (hazards rounded to 0.02) and kept;
// jobs with more than maxLookahead ticks of work left, or prices unknown,
// get Gpuq's rule.
//
// The model's tick is the one the pools' run lengths were recorded in
// (PoolHistory.Spell) when that is longer than the state's: the live
// scheduler decides at every offer refresh, seconds apart, and models the
// pools in spells of 10 minutes, so that a day's work is 144 ticks of the
// table rather than thousands. Each decision is the table's for the state
// counted in spells (atModelTick); the safety net keeps the state's tick.
type LookAhead struct{ Gpuq }

// NewLookAhead returns LookAhead on the settings of NewGpuq.
func NewLookAhead() LookAhead { return LookAhead{NewGpuq()} }

func (LookAhead) Name() string { return "gpuq-lookahead" }

func (g LookAhead) Decide(s State) Action {
	c := s.atModelTick()
	w := workTicks(c)
	if s.Prices.OnDemand == 0 || w > maxLookahead || (s.Current.Kind == Spot && s.Pools[s.Current.Pool].Available) {
		return g.Gpuq.Decide(s)
	}
	sl := slackTicks(c)
	pool := g.pick(s)
	if s.Current.Kind == OnDemand && pool >= 0 {
		k := poolModel(c, pool, g.PriorRun)
		t := k.table(w, sl)
		a := c.Pools[pool].History.Run
		hu := k.up[min(a, spellAges)-1]
		stay := k.odTick + (1-hu)*t.at(w-1, sl, onDemandUp, a+1) + hu*t.at(w-1, sl, onDemandDn, 1)
		so := s.startOverhead(Placement{Kind: Spot, Pool: pool})
		leave := t.atSlack(w, float64(sl)-float64(so)/float64(c.Tick), onSpot, a)
		if leave >= 0 && float64(s.Prices.Spot)*so.Hours()+leave < stay-tie(stay) {
			return guard(s, spotIn(pool, "spot is back and the look-ahead expects it to pay for the restart"))
		}
		return onDemand("on-demand: the look-ahead expects spot not to last")
	}
	if s.Current.Kind == Wait && pool < 0 {
		home := s.checkpoint()
		if home < 0 {
			home = mostUp(s)
		}
		k := poolModel(c, home, g.PriorRun)
		t := k.table(w, sl)
		a := c.Pools[home].History.Run
		od := k.odStart + orAt(t.atSlack(w, float64(sl)-k.d, onDemandDn, a), t.at(w, 0, onDemandDn, a))
		hd := k.down[min(a, spellAges)-1]
		if sl >= 1 && hd*t.at(w, sl-1, idleUp, 1)+(1-hd)*t.at(w, sl-1, idleDown, a+1) < od-tie(od) {
			return guard(s, wait("no spot capacity; the look-ahead expects waiting to cost less than on-demand"))
		}
		act := onDemand("no spot capacity; the look-ahead expects on-demand to cost less than waiting")
		if s.Checkpoint == "" {
			act.Pool = home
		}
		return guard(s, act)
	}
	return g.Gpuq.Decide(s)
}

// atModelTick is s counted in the tick the pools' run lengths were
// recorded in, when that is longer than s.Tick: the longest
// PoolHistory.Spell. Each pool's ticks, ticks up and current run are
// scaled to it (a run going on is at least one tick); run lengths recorded
// in another unit are left out, so that the model has its prior alone.
func (s State) atModelTick() State {
	m := s.Tick
	for _, p := range s.Pools {
		m = max(m, p.History.Spell)
	}
	if m == s.Tick {
		return s
	}
	f := float64(s.Tick) / float64(m)
	scale := func(n int) int { return int(math.Round(float64(n) * f)) }
	c := s
	c.Tick = m
	c.Pools = make([]Pool, len(s.Pools))
	for i, p := range s.Pools {
		h := p.History
		scaled := PoolHistory{Ticks: scale(h.Ticks), UpTicks: scale(h.UpTicks), UpRuns: h.UpRuns, Run: scale(h.Run), Spell: m, up: h.up}
		if h.Run > 0 {
			scaled.Run = max(scaled.Run, 1)
		}
		if h.Spell == m {
			scaled.UpSpells, scaled.DownSpells = h.UpSpells, h.DownSpells
		}
		p.History = scaled
		c.Pools[i] = p
	}
	return c
}

// spellAges is the number of ages the look-ahead tells apart; a run older
// than that is taken to end at the rate of the runs that lasted as long.
const spellAges = SpellBuckets

// hazards[a-1] is the chance that a run of capacity (or of none) that has
// lasted a ticks ends after this one, read from the runs the pool has been
// seen to end, with a prior of runs without memory of the mean length
// weighing as two runs.
type hazards [spellAges]float64

func spellHazards(spells [SpellBuckets]int32, ticks, current int, mean float64) hazards {
	const priorRuns = 2
	const b = SpellBuckets
	p := 1 / max(mean, 1)
	var count [b]float64
	left := priorRuns * 1.0
	short := 0 // ticks in the runs shorter than the last bucket
	seen := 0  // runs seen to end
	for n := range b - 1 {
		prior := left * p
		left -= prior
		count[n] = float64(spells[n]) + prior
		short += (n + 1) * int(spells[n])
		seen += int(spells[n])
	}
	seen += int(spells[b-1])
	count[b-1] = float64(spells[b-1]) + left
	var h hazards
	rest := 0.0
	for _, c := range count {
		rest += c
	}
	for n := range b - 1 {
		h[n] = count[n] / max(rest, 1e-9)
		rest -= count[n]
	}
	// Runs of the last bucket's length or more end at the rate their mean
	// length gives: the ticks in no shorter run over their number, the
	// prior's share of a run, and the run going on if it is one of them.
	// A history that has seen no run end gives the prior alone.
	tailTicks := left * (b - 1 + mean)
	tailRuns := left + float64(spells[b-1])
	switch long := ticks - short; {
	case seen == 0:
	case current < b:
		tailTicks += float64(max(long-current, 0))
	default:
		tailTicks += float64(max(long, 0))
		tailRuns++
	}
	h[b-1] = 1 / max(tailTicks/tailRuns-b+1, 1)
	return h
}

// quantise rounds a hazard so that tables are shared between decisions
// whose models differ only by noise.
func (h hazards) quantise() hazards {
	for i := range h {
		h[i] = math.Round(h[i]*50) / 50
	}
	return h
}

// lookahead is a value table: the expected cost still to pay, above running
// all the work left on spot, for a job with w ticks of work and s ticks of
// slack left, in each situation below, for one pool whose runs of capacity
// and of none end at the rates of its hazards.
type lookahead struct {
	w, s int // table bounds, in ticks
	// v[((w*(s+1)+s)*situations+x)*spellAges+a-1]
	v []float32
}

// Situations the look-ahead values.
const (
	onSpot     = iota // running on spot, warm, the pool up
	onDemandDn        // on on-demand, warm, the pool down
	onDemandUp        // on on-demand, warm, the pool up (a decision)
	idleDown          // idle, the pool down (a decision)
	idleUp            // idle, the pool up (a decision)
	situations
)

// lookaheadKey is what a table depends on.
type lookaheadKey struct {
	up, down hazards
	d        float64 // restart overhead, in ticks
	odTick   float64 // on-demand over spot, per tick
	odStart  float64 // an on-demand restart's overhead, at on-demand prices
	spStart  float64 // a spot restart's overhead, at spot prices
}

var lookaheads struct {
	sync.Mutex
	tables map[lookaheadKey]*lookahead
}

// maxLookahead bounds a table, in ticks of work and of slack; slack beyond
// it is valued as at it.
const maxLookahead = 300

// maxTables bounds the tables kept (each up to about 20 MB).
const maxTables = 8

func (k lookaheadKey) table(w, s int) *lookahead {
	w, s = min(w, maxLookahead), min(s, maxLookahead)
	lookaheads.Lock()
	defer lookaheads.Unlock()
	if t := lookaheads.tables[k]; t != nil && t.w >= w && t.s >= s {
		return t
	}
	if lookaheads.tables == nil || len(lookaheads.tables) >= maxTables {
		lookaheads.tables = map[lookaheadKey]*lookahead{}
	}
	if t := lookaheads.tables[k]; t != nil {
		w, s = max(w, t.w), max(s, t.s)
	}
	// Grow by half again, so that a sweep of longer jobs builds few tables.
	w, s = min(maxLookahead, w+w/2+8), min(maxLookahead, s+s/2+8)
	t := k.build(w, s)
	lookaheads.tables[k] = t
	return t
}

func (t *lookahead) at(w, s, x, a int) float64 {
	if w <= 0 {
		return 0
	}
	w, s = min(w, t.w), min(s, t.s)
	return float64(t.v[((w*(t.s+1)+s)*situations+x)*spellAges+min(a, spellAges)-1])
}

// atSlack values slack s-d for a d that need not be whole ticks, between
// the whole ticks on either side; -1 when it is negative.
func (t *lookahead) atSlack(w int, s float64, x, a int) float64 {
	if s < 0 {
		return -1
	}
	lo := math.Floor(s)
	f := s - lo
	v := t.at(w, int(lo), x, a)
	if f > 0 {
		v = (1-f)*v + f*t.at(w, int(lo)+1, x, a)
	}
	return v
}

// build fills the table by work left, then slack, each from smaller ones:
// a tick of work makes w one smaller, waiting makes s one smaller, and a
// restart costs d of slack, which is at least a tick when d is not zero.
func (k lookaheadKey) build(W, S int) *lookahead {
	t := &lookahead{w: W, s: S, v: make([]float32, (W+1)*(S+1)*situations*spellAges)}
	idx := func(w, s, x, a int) int { return ((w*(S+1)+s)*situations+x)*spellAges + a - 1 }
	next := func(a int) int { return min(a+1, spellAges) }
	// restart values a restart from (w, s), d of slack later: -1 when it
	// does not fit.
	restart := func(w, s, x, a int) float64 { return t.atSlack(w, float64(s)-k.d, x, a) }
	for w := 1; w <= W; w++ {
		for s := 0; s <= S; s++ {
			for a := 1; a <= spellAges; a++ {
				hu, hd := k.up[a-1], k.down[a-1]
				// On spot: one tick of work, then preempted or not.
				t.v[idx(w, s, onSpot, a)] = float32((1-hu)*t.at(w-1, s, onSpot, next(a)) + hu*t.at(w-1, s, idleDown, 1))
				t.v[idx(w, s, onDemandDn, a)] = float32(k.odTick + (1-hd)*t.at(w-1, s, onDemandDn, next(a)) + hd*t.at(w-1, s, onDemandUp, 1))
			}
			for a := 1; a <= spellAges; a++ {
				hu := k.up[a-1]
				stay := k.odTick + (1-hu)*t.at(w-1, s, onDemandUp, next(a)) + hu*t.at(w-1, s, onDemandDn, 1)
				if leave := restart(w, s, onSpot, a); leave >= 0 && k.spStart+leave < stay {
					stay = k.spStart + leave
				}
				t.v[idx(w, s, onDemandUp, a)] = float32(stay)
			}
			for a := 1; a <= spellAges; a++ {
				od := k.odStart + orAt(restart(w, s, onDemandUp, a), float64(t.v[idx(w, 0, onDemandUp, a)]))
				if sp := restart(w, s, onSpot, a); sp >= 0 && k.spStart+sp < od {
					od = k.spStart + sp
				}
				t.v[idx(w, s, idleUp, a)] = float32(od)
			}
			for a := 1; a <= spellAges; a++ {
				hd := k.down[a-1]
				best := k.odStart + orAt(restart(w, s, onDemandDn, a), float64(t.v[idx(w, 0, onDemandDn, a)]))
				if s >= 1 {
					wait := hd*float64(t.v[idx(w, s-1, idleUp, 1)]) + (1-hd)*float64(t.v[idx(w, s-1, idleDown, next(a))])
					best = min(best, wait)
				}
				t.v[idx(w, s, idleDown, a)] = float32(best)
			}
		}
	}
	return t
}

// tie is the margin under which two values of a table are the same: it
// keeps them in float32, and a choice the table made between equals is not
// to be undone by rounding.
func tie(v float64) float64 { return 1e-5*v + 1 }

// orAt is v, or at when v is -1: an on-demand start that takes more slack
// than is left leaves none.
func orAt(v, at float64) float64 {
	if v < 0 {
		return at
	}
	return v
}

// poolModel is the look-ahead's key for pool i of s. The prior's mean run
// of capacity is Gpuq.PriorRun, its mean outage a quarter of it, each
// weighing as two runs against the means of the history.
func poolModel(s State, i int, prior time.Duration) lookaheadKey {
	h := s.Pools[i].History
	tick := s.Tick.Hours()
	upMean := (float64(h.UpTicks) + 2*float64(prior/s.Tick)) / float64(h.UpRuns+2)
	downMean := (float64(h.Ticks-h.UpTicks) + 2*float64(prior/s.Tick)/4) / float64(h.UpRuns+2)
	d := float64(s.Overhead) / float64(s.Tick)
	upRun := 0 // the run going on, if it is one of capacity
	if s.Pools[i].Available {
		upRun = h.Run
	}
	return lookaheadKey{
		up:      spellHazards(h.UpSpells, h.UpTicks, upRun, upMean).quantise(),
		down:    spellHazards(h.DownSpells, h.Ticks-h.UpTicks, h.Run-upRun, downMean).quantise(),
		d:       math.Round(d*10) / 10,
		odTick:  float64(s.Prices.OnDemand-s.Prices.Spot) * tick,
		odStart: float64(s.Prices.OnDemand) * s.Overhead.Hours(),
		spStart: float64(s.Prices.Spot) * s.Overhead.Hours(),
	}
}

// workTicks is the work left in whole ticks.
func workTicks(s State) int { return int((s.Compute - s.Done + s.Tick - 1) / s.Tick) }

// slackTicks is the slack left in ticks.
func slackTicks(s State) int { return max(int(s.Slack()/s.Tick), 0) }
