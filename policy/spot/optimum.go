package spot

import "math"

const unreachable = math.MaxInt64 / 4

// Optimum is the lowest cost at which job could have met its deadline with
// full knowledge of the traces: the lower bound every strategy is measured
// against. It runs a dynamic programme over (tick, instance held and zone of
// the checkpoint, progress in quanta) under exactly the simulator's rules, so
// over several pools with a Move it weighs every move against waiting,
// on-demand and the other pools. A fresh instance is modelled as one step
// that holds it through its restart overhead (and transfer time), which is
// only ever worth starting when its pool has capacity for all of that time:
// being preempted during it, or leaving it, is dominated by waiting instead.
func Optimum(traces []Trace, job Job, prices Prices) (Result, error) {
	if err := prices.validate(); err != nil {
		return Result{}, err
	}
	m, err := newModel(traces, job)
	if err != nil {
		return Result{}, err
	}
	return m.optimum(prices), nil
}

// start is one way of starting a fresh instance from a zone.
type start struct {
	to    int   // the state it lands in, warm
	pool  int   // the spot pool it needs capacity in, or -1 for on-demand
	ticks int   // ticks spent until it is warm: at least 1
	gain  int64 // progress made in those ticks
	cost  int64 // holding it for those ticks, and the move's egress
	// Per tick: where it lands, or nil when it cannot start then.
	layer []int64
}

// frontier holds the cheapest way found to finish the job.
type frontier struct {
	best int64
	c    int64 // compute, in quanta
	ns   int   // states per progress value
}

// put lowers the cost of reaching state s with progress p in layer to v, or
// of finishing when p reaches the compute.
func (f *frontier) put(layer []int64, p int64, s int, v int64) {
	if p >= f.c {
		f.best = min(f.best, v)
	} else if x := int(p)*f.ns + s; layer[x] > v {
		layer[x] = v
	}
}

func (m model) optimum(prices Prices) Result {
	n := len(m.traces)
	c := m.compute
	// Zones: with a Move each pool is its own zone; without, all are one.
	nz := 1
	zoneOf := func(int) int { return 0 }
	if m.hasMove {
		nz = n
		zoneOf = func(j int) int { return j }
	}
	// States: idle in each zone, idle with no checkpoint yet (with a Move
	// only; without, it is idle in the one zone), on-demand in each zone,
	// then each spot pool. zone[s] is -1 for "no checkpoint yet".
	idle0, od0 := 0, nz
	fresh := 0
	if m.hasMove {
		fresh, od0 = nz, nz+1
	}
	sp0 := od0 + nz
	ns := sp0 + n
	zone := make([]int, ns)
	price := make([]int64, ns)
	for z := range nz {
		zone[idle0+z], zone[od0+z] = z, z
		price[od0+z] = m.tickCost(prices.OnDemand)
	}
	if m.hasMove {
		zone[fresh] = -1
	}
	for j := range n {
		zone[sp0+j] = zoneOf(j)
		price[sp0+j] = m.tickCost(prices.Spot)
	}
	idleIn := func(z int) int {
		if z < 0 {
			return fresh
		}
		return idle0 + z
	}

	// starts[z+1]: the fresh instances one can start from zone z.
	starts := make([][]start, nz+1)
	maxTicks := 0
	for z := -1; z < nz; z++ {
		add := func(to, pool int, over, extra int64) {
			// Without overhead a start is warm after one tick of full gain.
			st := start{to: to, pool: pool, ticks: max(int(ceilDiv(over, m.k)), 1)}
			st.gain = int64(st.ticks)*m.k - over
			st.cost = int64(st.ticks)*price[to] + extra
			maxTicks = max(maxTicks, st.ticks)
			starts[z+1] = append(starts[z+1], st)
		}
		if z < 0 {
			for zz := range nz {
				add(od0+zz, -1, m.over, 0)
			}
		} else {
			add(od0+z, -1, m.over, 0)
		}
		for j := range n {
			if m.hasMove && z >= 0 && j != z {
				add(sp0+j, j, m.over+m.move, m.moveCost())
			} else {
				add(sp0+j, j, m.over, 0)
			}
		}
	}

	// upRun[j][t]: consecutive ticks from t on which pool j has capacity.
	upRun := make([][]int32, n)
	for j, tr := range m.traces {
		run := make([]int32, m.ticks+1)
		for t := m.ticks - 1; t >= 0; t-- {
			if tr.Avail[m.start+t] > 0 {
				run[t] = run[t+1] + 1
			}
		}
		upRun[j] = run
	}

	nl := max(maxTicks+1, 2)
	layers := make([][]int64, nl)
	dirty := make([][2]int64, nl) // progress range written into each layer
	for l := range layers {
		layers[l] = make([]int64, int(c)*ns)
		for x := range layers[l] {
			layers[l][x] = unreachable
		}
		dirty[l] = [2]int64{c, -1}
	}
	f := &frontier{best: unreachable, c: c, ns: ns}
	mark := func(l int, lo, hi int64) {
		dirty[l][0] = min(dirty[l][0], max(lo, 0))
		dirty[l][1] = max(dirty[l][1], min(hi, c-1))
	}
	layers[0][idleIn(-1)] = 0
	mark(0, 0, 0)

	open := make([]bool, ns) // instances that can run during this tick
	low := make([]int64, nz+1)
	for t := 0; t < m.ticks; t++ {
		l := t % nl
		cur, next := layers[l], layers[(t+1)%nl]
		for z := range nz {
			open[od0+z] = true
		}
		for j := range n {
			open[sp0+j] = upRun[j][t] > 0
		}
		for _, sts := range starts {
			for x := range sts {
				st := &sts[x]
				st.layer = nil
				if t+st.ticks <= m.ticks && (st.pool < 0 || int(upRun[st.pool][t]) >= st.ticks) {
					st.layer = layers[(t+st.ticks)%nl]
				}
			}
		}
		lo, hi := max(dirty[l][0], c-int64(m.ticks-t)*m.k), dirty[l][1]
		for p := lo; p <= hi; p++ {
			row := cur[int(p)*ns : int(p)*ns+ns]
			for z := range low {
				low[z] = unreachable
			}
			for s, v := range row {
				if z := zone[s] + 1; v < low[z] {
					low[z] = v
				}
			}
			for zi, v := range low {
				if v >= unreachable {
					continue
				}
				f.put(next, p, idleIn(zi-1), v)
				for x := range starts[zi] {
					if st := &starts[zi][x]; st.layer != nil {
						f.put(st.layer, p+st.gain, st.to, v+st.cost)
					}
				}
			}
			// Keep the instance held, already past its overhead.
			for s := od0; s < ns; s++ {
				if v := row[s]; v < unreachable && open[s] {
					f.put(next, p+m.k, s, v+price[s])
				}
			}
		}
		if lo <= hi {
			mark((t+1)%nl, lo, hi+m.k)
			for _, sts := range starts {
				for _, st := range sts {
					if st.layer != nil {
						mark((t+st.ticks)%nl, lo+st.gain, hi+st.gain)
					}
				}
			}
		}
		for x := dirty[l][0] * int64(ns); x < (dirty[l][1]+1)*int64(ns); x++ {
			cur[x] = unreachable
		}
		dirty[l] = [2]int64{c, -1}
	}
	return Result{
		Strategy:    "optimum",
		CostMicros:  m.micros(f.best),
		Currency:    prices.Currency,
		DeadlineMet: f.best < unreachable,
	}
}
