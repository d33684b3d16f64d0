package spot

import (
	"fmt"
	"time"
)

// Prices are the hourly prices a simulation charges, in micros of Currency.
type Prices struct {
	OnDemand int64 // per hour of an on-demand instance
	Spot     int64 // per hour of a spot instance, the same in every pool
	Currency string
}

func (p Prices) validate() error {
	switch {
	case p.OnDemand <= 0:
		return fmt.Errorf("prices.on_demand: must be > 0, got %d", p.OnDemand)
	case p.Spot < 0:
		return fmt.Errorf("prices.spot: must be ≥ 0, got %d", p.Spot)
	case p.Currency == "":
		return fmt.Errorf("prices.currency: must not be empty")
	}
	return nil
}

// Job is the work a simulation replays: Compute hours of work due Deadline
// after Start, where Start is an offset into the traces.
type Job struct {
	Compute  time.Duration
	Deadline time.Duration // relative to Start
	Overhead time.Duration // progress lost at each (re)start on a new instance
	Start    time.Duration // rounded down to a whole tick
	// Move is what resuming in another pool's zone than the checkpoint's
	// costs on top of Overhead. The zero Move makes every pool one place.
	Move Move
}

// Move is the cost of resuming a job in a spot pool whose zone does not hold
// its latest checkpoint: the checkpoint's egress, billed once per move, and
// the time the transfer takes, lost like the restart overhead. The
// checkpoint lives in the zone of the last instance that paid its whole
// overhead; an on-demand instance always runs in that zone (on-demand
// capacity is the same in every zone), so only spot starts ever move.
type Move struct {
	Micros int64         // egress of the checkpoint, in the prices' currency
	Time   time.Duration // transfer time, lost as progress
}

func (m Move) zero() bool { return m.Micros == 0 && m.Time == 0 }

// maxQuantum bounds the unit progress is counted in. A tick of the traces is
// split into quanta so that a restart overhead shorter than a tick (3 minutes
// against a 10-minute tick) is charged as such and not as a whole tick.
const maxQuantum = time.Minute

// model is a job laid over traces in integer units, shared by the simulator
// and the optimum so that both replay exactly the same rules: a tick lasts
// gap and is split into k quanta; compute and overhead are counted in quanta
// (rounded up); the deadline is t whole ticks after the start.
type model struct {
	gap        time.Duration
	k          int64 // quanta per tick
	quantum    time.Duration
	compute    int64 // quanta
	over       int64 // quanta
	move       int64 // quanta of transfer time a move adds to over
	moveMicros int64
	hasMove    bool // whether the zone of the checkpoint matters at all
	ticks      int  // ticks from start to deadline
	start      int  // index of the first tick in the traces
	traces     []Trace
}

func newModel(traces []Trace, job Job) (model, error) {
	if len(traces) == 0 {
		return model{}, fmt.Errorf("traces: need at least one spot pool")
	}
	gap := traces[0].Gap
	names := make(map[string]bool, len(traces))
	for _, tr := range traces {
		if tr.Gap != gap {
			return model{}, fmt.Errorf("trace %s: gap %v differs from trace %s's %v; pools of one job must share a tick", tr.Name, tr.Gap, traces[0].Name, gap)
		}
		if names[tr.Name] {
			return model{}, fmt.Errorf("trace %s: appears twice; each pool needs its own name", tr.Name)
		}
		names[tr.Name] = true
	}
	switch {
	case job.Compute <= 0:
		return model{}, fmt.Errorf("job.compute: must be > 0, got %v", job.Compute)
	case job.Overhead < 0:
		return model{}, fmt.Errorf("job.overhead: must be ≥ 0, got %v", job.Overhead)
	case job.Start < 0:
		return model{}, fmt.Errorf("job.start: must be ≥ 0, got %v", job.Start)
	case job.Move.Time < 0:
		return model{}, fmt.Errorf("job.move.time: must be ≥ 0, got %v", job.Move.Time)
	case job.Move.Micros < 0:
		return model{}, fmt.Errorf("job.move.micros: must be ≥ 0, got %d", job.Move.Micros)
	}
	k := int64((gap + maxQuantum - 1) / maxQuantum)
	for gap%time.Duration(k) != 0 {
		k++
	}
	m := model{gap: gap, k: k, quantum: gap / time.Duration(k), traces: traces}
	m.compute = ceilDiv(int64(job.Compute), int64(m.quantum))
	m.over = ceilDiv(int64(job.Overhead), int64(m.quantum))
	m.move = ceilDiv(int64(job.Move.Time), int64(m.quantum))
	m.moveMicros = job.Move.Micros
	m.hasMove = len(traces) > 1 && !job.Move.zero()
	m.ticks = int(job.Deadline / gap)
	m.start = int(job.Start / gap)
	if need := ceilDiv(m.compute+m.over, k); int64(m.ticks) < need {
		return model{}, fmt.Errorf("job.deadline: %v cannot fit compute %v plus restart overhead %v on %v ticks; give at least %v",
			job.Deadline, job.Compute, job.Overhead, gap, time.Duration(need)*gap)
	}
	for _, tr := range traces {
		if m.start+m.ticks > len(tr.Avail) {
			return model{}, fmt.Errorf("job.deadline: start %v + deadline %v runs past the end of trace %s (%v)",
				job.Start, job.Deadline, tr.Name, tr.Duration())
		}
	}
	return m, nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

const msPerHour = int64(time.Hour / time.Millisecond)

// tickCost is the cost of holding an instance at hourly price for one tick,
// in micros × milliseconds per hour, the unit that adds tick charges and
// moves exactly.
func (m model) tickCost(price int64) int64 { return price * int64(m.gap/time.Millisecond) }

// moveCost is one move's egress in the unit of tickCost.
func (m model) moveCost() int64 { return m.moveMicros * msPerHour }

// micros converts a sum of tickCost and moveCost into micros, rounding the
// tick charges to the nearest micro.
func (m model) micros(cost int64) int64 { return (cost + msPerHour/2) / msPerHour }
