package spot

import (
	"fmt"
	"time"
)

// Result is what one simulated job cost and how it went.
type Result struct {
	Strategy     string        `json:"strategy"`
	CostMicros   int64         `json:"cost_micros"`
	Currency     string        `json:"currency"`
	DeadlineMet  bool          `json:"deadline_met"`
	Finished     time.Duration `json:"finished_ns"` // when the work was done, or the deadline
	Preemptions  int           `json:"preemptions"` // held spot instances taken away
	Switches     int           `json:"switches"`    // instances left by the strategy's own choice
	Starts       int           `json:"starts"`      // instances started, each paying the overhead
	Moves        int           `json:"moves"`       // spot starts outside the checkpoint's zone
	SpotTime     time.Duration `json:"spot_ns"`
	OnDemandTime time.Duration `json:"on_demand_ns"`
}

// Simulate replays job over traces, one trace per spot pool, asking st at
// every tick where to run; each pool's history starts with the trace before
// the job's start, as the live scheduler would have seen it. A spot instance
// is held for a whole tick and is preempted at the first tick its pool has no
// capacity; each start of an instance, the first one included, loses the
// restart overhead of progress, and a start outside the checkpoint's zone
// also job.Move (see Move).
// Held time is charged tick by tick at prices, each move once.
func Simulate(traces []Trace, job Job, prices Prices, st Strategy) (Result, error) {
	if err := prices.validate(); err != nil {
		return Result{}, err
	}
	m, err := newModel(traces, job)
	if err != nil {
		return Result{}, err
	}
	return m.simulate(prices, st)
}

func (m model) simulate(prices Prices, st Strategy) (Result, error) {
	q := m.quantum
	pools := make([]Pool, len(m.traces))
	for i, tr := range m.traces {
		pools[i].ID = tr.Name
		for k := range m.start {
			pools[i].History.Observe(tr.Avail[k] > 0)
		}
	}
	r := Result{Strategy: st.Name(), Currency: prices.Currency}
	var cur Placement
	var warm, done int64
	var spotTicks, odTicks int64
	loc, zone := -1, -1 // the checkpoint's zone, the current instance's
	t := 0
	for ; t < m.ticks && done < m.compute; t++ {
		for i := range pools {
			up := m.traces[i].Avail[m.start+t] > 0
			pools[i].Available = up
			pools[i].History.Observe(up)
		}
		if cur.Kind == Spot && !pools[cur.Pool].Available {
			r.Preemptions++
			cur, warm = Placement{}, 0
		}
		s := State{
			Elapsed:  time.Duration(t) * m.gap,
			Done:     time.Duration(done) * q,
			Compute:  time.Duration(m.compute) * q,
			Deadline: time.Duration(m.ticks) * m.gap,
			Overhead: time.Duration(m.over) * q,
			Tick:     m.gap,
			Current:  cur,
			Warmup:   time.Duration(warm) * q,
			Pools:    pools,
			Prices:   prices,
		}
		if m.hasMove {
			s.Move = Move{Micros: m.moveMicros, Time: time.Duration(m.move) * q}
			if loc >= 0 {
				s.Checkpoint = pools[loc].ID
			}
		}
		a := st.Decide(s)
		if a.Kind == Spot && (a.Pool < 0 || a.Pool >= len(pools) || !pools[a.Pool].Available) {
			return Result{}, fmt.Errorf("strategy %s chose spot pool %d at tick %d, which has no capacity", st.Name(), a.Pool, t)
		}
		if a.Kind > OnDemand {
			return Result{}, fmt.Errorf("strategy %s chose unknown kind %d at tick %d", st.Name(), a.Kind, t)
		}
		if a.Kind == OnDemand && loc < 0 && (a.Pool < 0 || a.Pool >= len(pools)) {
			return Result{}, fmt.Errorf("strategy %s chose on-demand in zone %d at tick %d, which is not a pool's", st.Name(), a.Pool, t)
		}
		if !a.same(cur) {
			if cur.Kind != Wait {
				r.Switches++
			}
			if a.Kind != Wait {
				r.Starts++
				warm = m.over
				switch {
				case a.Kind == OnDemand && loc >= 0:
					zone = loc
				case a.Kind == Spot && m.hasMove && loc >= 0 && a.Pool != loc:
					r.Moves++
					warm += m.move
					zone = a.Pool
				default:
					zone = a.Pool
				}
			}
			cur = a.Placement
		}
		switch cur.Kind {
		case Spot:
			spotTicks++
		case OnDemand:
			odTicks++
		default:
			continue
		}
		paid := min(m.k, warm)
		warm -= paid
		done += m.k - paid
		if warm == 0 {
			loc = zone
		}
	}
	r.DeadlineMet = done >= m.compute
	r.Finished = time.Duration(t) * m.gap
	r.SpotTime = time.Duration(spotTicks) * m.gap
	r.OnDemandTime = time.Duration(odTicks) * m.gap
	r.CostMicros = m.micros(m.tickCost(spotTicks*prices.Spot+odTicks*prices.OnDemand) + int64(r.Moves)*m.moveCost())
	return r, nil
}
