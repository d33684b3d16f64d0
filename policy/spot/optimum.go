package spot

import "math"

const unreachable = math.MaxInt64 / 4

// Optimum is the lowest cost at which job could have met its deadline with
// full knowledge of the traces: the lower bound every strategy is measured
// against. It runs a dynamic programme over (tick, instance held, progress in
// quanta) under exactly the simulator's rules. A fresh instance is modelled
// as one step that holds it through the restart overhead, which is only ever
// worth starting when its pool has capacity for all of that time; being
// preempted during it is dominated by waiting instead.
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

func (m model) optimum(prices Prices) Result {
	n := len(m.traces)
	ns := n + 2 // instance states: 0 idle, 1 on-demand, 2+i spot pool i
	c := m.compute
	warmTicks := int(ceilDiv(m.over, m.k)) // ticks a fresh instance spends paying the overhead
	warmGain := int64(warmTicks)*m.k - m.over

	price := make([]int64, ns)
	price[1] = prices.OnDemand
	for s := 2; s < ns; s++ {
		price[s] = prices.Spot
	}
	// upRun[i][t]: consecutive ticks from t on which pool i has capacity.
	upRun := make([][]int32, n)
	for i, tr := range m.traces {
		run := make([]int32, m.ticks+1)
		for t := m.ticks - 1; t >= 0; t-- {
			if tr.Avail[m.start+t] > 0 {
				run[t] = run[t+1] + 1
			}
		}
		upRun[i] = run
	}

	nl := max(warmTicks+1, 2)
	layers := make([][]int64, nl)
	dirty := make([][2]int64, nl) // progress range written into each layer
	for l := range layers {
		layers[l] = make([]int64, int(c)*ns)
		for x := range layers[l] {
			layers[l][x] = unreachable
		}
		dirty[l] = [2]int64{c, -1}
	}
	mark := func(l int, lo, hi int64) {
		dirty[l][0] = min(dirty[l][0], max(lo, 0))
		dirty[l][1] = max(dirty[l][1], min(hi, c-1))
	}
	layers[0][0] = 0
	mark(0, 0, 0)

	best := int64(unreachable)
	open := make([]bool, ns) // instance states usable at this tick
	for t := 0; t < m.ticks; t++ {
		cur := layers[t%nl]
		next := layers[(t+1)%nl]
		ahead := layers[(t+warmTicks)%nl]
		open[1] = true
		for i := range n {
			open[2+i] = upRun[i][t] > 0
		}
		lo := max(0, c-int64(m.ticks-t)*m.k)
		hi := min(c-1, int64(t)*m.k)
		startOK := t+warmTicks <= m.ticks
		for p := lo; p <= hi; p++ {
			row := cur[int(p)*ns : int(p)*ns+ns]
			low := row[0]
			for _, v := range row[1:] {
				low = min(low, v)
			}
			if low >= unreachable {
				continue
			}
			if next[int(p)*ns] > low {
				next[int(p)*ns] = low
			}
			// Keep the instance held (or, without overhead, take any).
			np := p + m.k
			for s := 1; s < ns; s++ {
				if !open[s] {
					continue
				}
				v := row[s]
				if warmTicks == 0 {
					v = low
				}
				if v >= unreachable {
					continue
				}
				v += price[s]
				if np >= c {
					best = min(best, v)
				} else if x := int(np)*ns + s; next[x] > v {
					next[x] = v
				}
			}
			if warmTicks == 0 || !startOK {
				continue
			}
			// Start a fresh instance and hold it through the overhead.
			sp := p + warmGain
			for s := 1; s < ns; s++ {
				if s >= 2 && int(upRun[s-2][t]) < warmTicks {
					continue
				}
				v := low + int64(warmTicks)*price[s]
				if sp >= c {
					best = min(best, v)
				} else if x := int(sp)*ns + s; ahead[x] > v {
					ahead[x] = v
				}
			}
		}
		mark((t+1)%nl, lo, hi+m.k)
		if startOK && warmTicks > 0 {
			mark((t+warmTicks)%nl, lo+warmGain, hi+warmGain)
		}
		l := t % nl
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
