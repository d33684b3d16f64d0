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
	ticks int   // ticks spent paying the overhead; 0 when there is none
	gain  int64 // progress made in those ticks
	extra int64 // the move's egress, in tickCost units
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
			st := start{to: to, pool: pool, extra: extra}
			if over > 0 {
				st.ticks = int(ceilDiv(over, m.k))
				st.gain = int64(st.ticks)*m.k - over
				maxTicks = max(maxTicks, st.ticks)
			}
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
	best := int64(unreachable)
	land := func(l int, p int64, s int, v int64) {
		if p >= c {
			best = min(best, v)
			return
		}
		if x := int(p)*ns + s; layers[l][x] > v {
			layers[l][x] = v
			dirty[l][0] = min(dirty[l][0], p)
			dirty[l][1] = max(dirty[l][1], p)
		}
	}
	land(0, 0, idleIn(-1), 0)

	open := make([]bool, ns) // instances that can run during this tick
	low := make([]int64, nz+1)
	for t := 0; t < m.ticks; t++ {
		l := t % nl
		cur := layers[l]
		next := (t + 1) % nl
		for z := range nz {
			open[od0+z] = true
		}
		for j := range n {
			open[sp0+j] = upRun[j][t] > 0
		}
		lo := max(dirty[l][0], c-int64(m.ticks-t)*m.k)
		for p := lo; p <= dirty[l][1]; p++ {
			row := cur[int(p)*ns : int(p)*ns+ns]
			for z := range low {
				low[z] = unreachable
			}
			for s, v := range row {
				if v < unreachable {
					low[zone[s]+1] = min(low[zone[s]+1], v)
				}
			}
			for zi, v := range low {
				if v >= unreachable {
					continue
				}
				land(next, p, idleIn(zi-1), v)
				for _, st := range starts[zi] {
					switch {
					case st.ticks == 0:
						if open[st.to] {
							land(next, p+m.k, st.to, v+price[st.to]+st.extra)
						}
					case t+st.ticks > m.ticks:
					case st.pool >= 0 && int(upRun[st.pool][t]) < st.ticks:
					default:
						land((t+st.ticks)%nl, p+st.gain, st.to, v+int64(st.ticks)*price[st.to]+st.extra)
					}
				}
			}
			// Keep the instance held, already past its overhead.
			for s := od0; s < ns; s++ {
				if v := row[s]; v < unreachable && open[s] {
					land(next, p+m.k, s, v+price[s])
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
		CostMicros:  m.micros(best),
		Currency:    prices.Currency,
		DeadlineMet: best < unreachable,
	}
}
