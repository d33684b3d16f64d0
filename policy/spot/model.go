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
}

// maxQuantum bounds the unit progress is counted in. A tick of the traces is
// split into quanta so that a restart overhead shorter than a tick (3 minutes
// against a 10-minute tick) is charged as such and not as a whole tick.
const maxQuantum = time.Minute

// model is a job laid over traces in integer units, shared by the simulator
// and the optimum so that both replay exactly the same rules: a tick lasts
// gap and is split into k quanta; compute and overhead are counted in quanta
// (rounded up); the deadline is t whole ticks after the start.
type model struct {
	gap     time.Duration
	k       int64 // quanta per tick
	quantum time.Duration
	compute int64 // quanta
	over    int64 // quanta
	ticks   int   // ticks from start to deadline
	start   int   // index of the first tick in the traces
	traces  []Trace
}

func newModel(traces []Trace, job Job) (model, error) {
	if len(traces) == 0 {
		return model{}, fmt.Errorf("traces: need at least one spot pool")
	}
	gap := traces[0].Gap
	for _, tr := range traces[1:] {
		if tr.Gap != gap {
			return model{}, fmt.Errorf("trace %s: gap %v differs from trace %s's %v; pools of one job must share a tick", tr.Name, tr.Gap, traces[0].Name, gap)
		}
	}
	switch {
	case job.Compute <= 0:
		return model{}, fmt.Errorf("job.compute: must be > 0, got %v", job.Compute)
	case job.Overhead < 0:
		return model{}, fmt.Errorf("job.overhead: must be ≥ 0, got %v", job.Overhead)
	case job.Start < 0:
		return model{}, fmt.Errorf("job.start: must be ≥ 0, got %v", job.Start)
	}
	k := int64((gap + maxQuantum - 1) / maxQuantum)
	for gap%time.Duration(k) != 0 {
		k++
	}
	m := model{gap: gap, k: k, quantum: gap / time.Duration(k), traces: traces}
	m.compute = ceilDiv(int64(job.Compute), int64(m.quantum))
	m.over = ceilDiv(int64(job.Overhead), int64(m.quantum))
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

// micros converts a sum of (hourly price × ticks held) into micros.
func (m model) micros(priceTicks int64) int64 {
	const msPerHour = int64(time.Hour / time.Millisecond)
	ms := int64(m.gap / time.Millisecond)
	return (priceTicks*ms + msPerHour/2) / msPerHour
}
