package spot

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Prices that make tick costs easy to compute by hand with one-minute ticks:
// on-demand 100,000 micros a tick, spot 20,000.
var handPrices = Prices{OnDemand: 6_000_000, Spot: 1_200_000, Currency: "USD"}

func trace(name string, gap time.Duration, avail ...int32) Trace {
	return Trace{Name: name, Gap: gap, Avail: avail}
}

func TestOptimumMatchesHandComputedOptima(t *testing.T) {
	t.Parallel()
	const od, sp = 100_000, 20_000
	tests := []struct {
		name   string
		traces []Trace
		job    Job
		want   int64
	}{
		{"spot all along, no overhead", []Trace{trace("a", time.Minute, 1, 1, 1)},
			Job{Compute: 3 * time.Minute, Deadline: 3 * time.Minute}, 3 * sp},
		{"no spot at all: on-demand with its overhead", []Trace{trace("a", time.Minute, 0, 0, 0, 0, 0)},
			Job{Compute: 3 * time.Minute, Deadline: 5 * time.Minute, Overhead: time.Minute}, 4 * od},
		{"waits through an outage", []Trace{trace("a", time.Minute, 1, 1, 0, 0, 1, 1, 1, 1)},
			Job{Compute: 4 * time.Minute, Deadline: 8 * time.Minute}, 4 * sp},
		{"pays the overhead twice around an outage", []Trace{trace("a", time.Minute, 1, 1, 0, 0, 1, 1, 1, 1)},
			Job{Compute: 4 * time.Minute, Deadline: 8 * time.Minute, Overhead: time.Minute}, 6 * sp},
		{"spot first, on-demand once spot is gone", []Trace{trace("a", time.Minute, 1, 1, 0, 0, 0, 0)},
			Job{Compute: 4 * time.Minute, Deadline: 6 * time.Minute, Overhead: time.Minute}, 2*sp + 4*od},
		{"moves from one pool to the other", []Trace{trace("a", time.Minute, 1, 1, 0, 0), trace("b", time.Minute, 0, 0, 1, 1)},
			Job{Compute: 2 * time.Minute, Deadline: 4 * time.Minute, Overhead: time.Minute}, 4 * sp},
		{"pays the move's egress and transfer time", []Trace{trace("a", time.Minute, 1, 1, 1, 0, 0, 0), trace("b", time.Minute, 0, 0, 0, 1, 1, 1)},
			Job{Compute: 3 * time.Minute, Deadline: 6 * time.Minute, Overhead: time.Minute, Move: Move{Micros: 7, Time: time.Minute}}, 6*sp + 7},
		{"on-demand beats a move too dear", []Trace{trace("a", time.Minute, 1, 1, 1, 0, 0, 0), trace("b", time.Minute, 0, 0, 0, 1, 1, 1)},
			Job{Compute: 3 * time.Minute, Deadline: 6 * time.Minute, Overhead: time.Minute, Move: Move{Micros: 2 * od, Time: time.Minute}}, 3*sp + 2*od},
		{"the first start moves nothing", []Trace{trace("a", time.Minute, 0, 0, 0), trace("b", time.Minute, 1, 1, 1)},
			Job{Compute: 2 * time.Minute, Deadline: 3 * time.Minute, Overhead: time.Minute, Move: Move{Micros: od, Time: time.Minute}}, 3 * sp},
		{"overhead shorter than a tick", []Trace{trace("a", 10*time.Minute, 1, 1, 1)},
			Job{Compute: 20 * time.Minute, Deadline: 30 * time.Minute, Overhead: 3 * time.Minute}, 3 * 10 * sp},
		{"starts later in the trace", []Trace{trace("a", time.Minute, 0, 0, 1, 1, 1)},
			Job{Compute: 2 * time.Minute, Deadline: 3 * time.Minute, Start: 2 * time.Minute}, 2 * sp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Optimum(tt.traces, tt.job, handPrices)
			if err != nil {
				t.Fatal(err)
			}
			if got.CostMicros != tt.want || !got.DeadlineMet {
				t.Errorf("Optimum = %d micros (met %v), want %d", got.CostMicros, got.DeadlineMet, tt.want)
			}
		})
	}
}

// scripted plays a fixed list of placements, one per tick.
type scripted []Placement

func (scripted) Name() string { return "scripted" }

func (s scripted) Decide(st State) Action {
	return Action{Placement: s[int(st.Elapsed/st.Tick)]}
}

// genTraces draws pools sharing one tick.
func genTraces(t *rapid.T, gap time.Duration, minTicks, maxTicks, maxPools int) []Trace {
	ticks := rapid.IntRange(minTicks, maxTicks).Draw(t, "ticks")
	pools := rapid.IntRange(1, maxPools).Draw(t, "pools")
	out := make([]Trace, pools)
	for i := range out {
		avail := rapid.SliceOfN(rapid.Int32Range(0, 1), ticks, ticks).Draw(t, fmt.Sprintf("pool%d", i))
		out[i] = trace(fmt.Sprintf("p%d", i), gap, avail...)
	}
	return out
}

// genJob draws a feasible job over ticks ticks of gap.
func genJob(t *rapid.T, gap time.Duration, ticks int) Job {
	overhead := time.Duration(rapid.IntRange(0, 3).Draw(t, "overhead")) * gap / 2
	compute := time.Duration(rapid.IntRange(1, ticks).Draw(t, "compute")) * gap
	need := int((compute + overhead + gap - 1) / gap)
	if need > ticks {
		overhead = 0
		need = int(compute / gap)
	}
	deadline := time.Duration(rapid.IntRange(need, ticks).Draw(t, "deadline")) * gap
	return Job{Compute: compute, Deadline: deadline, Overhead: overhead}
}

// genMove draws a move between zones: none, egress only, transfer time
// only, or both.
func genMove(t *rapid.T, gap time.Duration) Move {
	return Move{
		Micros: rapid.SampledFrom([]int64{0, 30_000}).Draw(t, "move micros"),
		Time:   time.Duration(rapid.IntRange(0, 3).Draw(t, "move time")) * gap / 2,
	}
}

func TestOptimumEqualsExhaustiveSearchOnTinyTraces(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		traces := genTraces(t, time.Minute, 3, 6, 2)
		job := genJob(t, time.Minute, len(traces[0].Avail))
		job.Move = genMove(t, time.Minute)
		opt, err := Optimum(traces, job, handPrices)
		if err != nil {
			t.Fatal(err)
		}
		choices := []Placement{{Kind: Wait}}
		for i := range traces {
			// On-demand names its zone before there is a checkpoint.
			choices = append(choices, Placement{Kind: OnDemand, Pool: i}, Placement{Kind: Spot, Pool: i})
		}
		ticks := int(job.Deadline / time.Minute)
		best := int64(-1)
		plan := make(scripted, ticks)
		var search func(k int)
		search = func(k int) {
			if k == ticks {
				r, err := Simulate(traces, job, handPrices, plan)
				if err == nil && r.DeadlineMet && (best < 0 || r.CostMicros < best) {
					best = r.CostMicros
				}
				return
			}
			for _, c := range choices {
				plan[k] = c
				search(k + 1)
			}
		}
		search(0)
		if best != opt.CostMicros {
			t.Fatalf("Optimum = %d micros, exhaustive search = %d", opt.CostMicros, best)
		}
	})
}

func TestOptimumIsAtMostEveryStrategyAndOnlySpotOnlyMisses(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		gap := rapid.SampledFrom([]time.Duration{time.Minute, 10 * time.Minute}).Draw(t, "gap")
		traces := genTraces(t, gap, 10, 120, 3)
		job := genJob(t, gap, len(traces[0].Avail))
		cmp, err := Compare(traces, job, handPrices, Strategies())
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range cmp.Outcomes {
			if !o.DeadlineMet {
				if o.Strategy != (SpotOnly{}).Name() {
					t.Fatalf("%s missed the deadline", o.Strategy)
				}
				continue
			}
			if o.CostMicros < cmp.Optimum.CostMicros {
				t.Fatalf("%s cost %d micros, under the optimum %d", o.Strategy, o.CostMicros, cmp.Optimum.CostMicros)
			}
		}
	})
}

// vanishing is spot capacity in every pool until tick k, then none at all.
func vanishing(pools, ticks, k int, gap time.Duration) []Trace {
	out := make([]Trace, pools)
	for i := range out {
		avail := make([]int32, ticks)
		for x := range k {
			avail[x] = 1
		}
		out[i] = trace(fmt.Sprintf("p%d", i), gap, avail...)
	}
	return out
}

// flapping has capacity only on ticks where (tick+phase)%period == 0, so spot
// keeps coming back just long enough to tempt a restart.
func flapping(ticks, period, phase int, gap time.Duration) []Trace {
	avail := make([]int32, ticks)
	for x := range avail {
		if (x+phase)%period == 0 {
			avail[x] = 1
		}
	}
	return []Trace{trace("flap", gap, avail...)}
}

func TestSafetyNetMeetsEveryDeadlineWhenSpotVanishesAtTheWorstMoment(t *testing.T) {
	t.Parallel()
	const ticks = 60
	gap := 10 * time.Minute
	jobs := []Job{
		{Compute: 50 * gap, Deadline: 55 * gap, Overhead: 12 * time.Minute},
		{Compute: 40 * gap, Deadline: 60 * gap, Overhead: 3 * time.Minute},
		{Compute: 54 * gap, Deadline: 60 * gap, Overhead: 50 * time.Minute},
		{Compute: 30 * gap, Deadline: 31 * gap},
	}
	var adversaries []struct {
		name   string
		traces []Trace
	}
	for k := range ticks + 1 {
		adversaries = append(adversaries, struct {
			name   string
			traces []Trace
		}{fmt.Sprintf("vanish at tick %d", k), vanishing(2, ticks, k, gap)})
	}
	for period := 2; period <= 7; period++ {
		for phase := range period {
			adversaries = append(adversaries, struct {
				name   string
				traces []Trace
			}{fmt.Sprintf("flap every %d ticks, phase %d", period, phase), flapping(ticks, period, phase, gap)})
		}
	}
	for _, st := range Strategies() {
		if st.Name() == (SpotOnly{}).Name() {
			continue
		}
		for _, job := range jobs {
			for _, adv := range adversaries {
				r, err := Simulate(adv.traces, job, handPrices, st)
				if err != nil {
					t.Fatal(err)
				}
				if !r.DeadlineMet {
					t.Errorf("%s, job %+v, %s: missed the deadline", st.Name(), job, adv.name)
				}
			}
		}
	}
}

func TestSpotOnlyMissesTheDeadlineWhenSpotVanishes(t *testing.T) {
	t.Parallel()
	gap := 10 * time.Minute
	r, err := Simulate(vanishing(1, 60, 30, gap), Job{Compute: 40 * gap, Deadline: 60 * gap}, handPrices, SpotOnly{})
	if err != nil {
		t.Fatal(err)
	}
	if r.DeadlineMet {
		t.Fatalf("spot-only met the deadline with 30 ticks of spot for 40 ticks of work: %+v", r)
	}
}

func TestSimulateCountsPreemptionsSwitchesAndStarts(t *testing.T) {
	t.Parallel()
	traces := []Trace{trace("a", time.Minute, 1, 1, 0, 1, 1, 1)}
	job := Job{Compute: 4 * time.Minute, Deadline: 6 * time.Minute}
	plan := scripted{{Kind: Spot}, {Kind: Spot}, {Kind: Wait}, {Kind: Spot}, {Kind: OnDemand}, {Kind: OnDemand}}
	r, err := Simulate(traces, job, handPrices, plan)
	if err != nil {
		t.Fatal(err)
	}
	want := Result{Strategy: "scripted", CostMicros: 3*20_000 + 100_000, Currency: "USD", DeadlineMet: true,
		Finished: 5 * time.Minute, Preemptions: 1, Switches: 1, Starts: 3, SpotTime: 3 * time.Minute, OnDemandTime: time.Minute}
	if r != want {
		t.Errorf("Simulate = %+v\nwant       %+v", r, want)
	}
}

func TestSimulateRejectsSpotInAPoolWithoutCapacity(t *testing.T) {
	t.Parallel()
	traces := []Trace{trace("a", time.Minute, 0, 1)}
	_, err := Simulate(traces, Job{Compute: time.Minute, Deadline: 2 * time.Minute}, handPrices, scripted{{Kind: Spot}, {Kind: Spot}})
	if err == nil || !strings.Contains(err.Error(), "no capacity") {
		t.Fatalf("err = %v, want one about a pool without capacity", err)
	}
}

func TestJobAndTraceErrorsNameTheField(t *testing.T) {
	t.Parallel()
	a := trace("a", time.Minute, 1, 1, 1, 1)
	tests := []struct {
		name   string
		traces []Trace
		job    Job
		prices Prices
		want   string
	}{
		{"no pools", nil, Job{Compute: time.Minute, Deadline: time.Minute}, handPrices, "traces:"},
		{"gaps differ", []Trace{a, trace("b", time.Second, 1)}, Job{Compute: time.Minute, Deadline: time.Minute}, handPrices, "trace b: gap"},
		{"no compute", []Trace{a}, Job{Deadline: time.Minute}, handPrices, "job.compute"},
		{"deadline too short", []Trace{a}, Job{Compute: 2 * time.Minute, Deadline: 2 * time.Minute, Overhead: time.Second}, handPrices, "job.deadline"},
		{"past the trace", []Trace{a}, Job{Compute: time.Minute, Deadline: 2 * time.Minute, Start: 3 * time.Minute}, handPrices, "runs past the end"},
		{"negative transfer", []Trace{a}, Job{Compute: time.Minute, Deadline: time.Minute, Move: Move{Time: -time.Second}}, handPrices, "job.move.time"},
		{"negative egress", []Trace{a}, Job{Compute: time.Minute, Deadline: time.Minute, Move: Move{Micros: -1}}, handPrices, "job.move.micros"},
		{"one name twice", []Trace{a, a}, Job{Compute: time.Minute, Deadline: time.Minute}, handPrices, "appears twice"},
		{"no on-demand price", []Trace{a}, Job{Compute: time.Minute, Deadline: time.Minute}, Prices{Currency: "USD"}, "prices.on_demand"},
		{"no currency", []Trace{a}, Job{Compute: time.Minute, Deadline: time.Minute}, Prices{OnDemand: 1}, "prices.currency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Simulate(tt.traces, tt.job, tt.prices, Greedy{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestDecodeTrace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, wantErr string
		want              Trace
	}{
		{name: "published layout", in: `{"metadata": {"gap_seconds": 600}, "data": [1, 0, 2]}`,
			want: trace("t", 10*time.Minute, 1, 0, 2)},
		{name: "no gap", in: `{"metadata": {}, "data": [1]}`, wantErr: "metadata.gap_seconds: missing"},
		{name: "sub-millisecond gap", in: `{"metadata": {"gap_seconds": 0.0001}, "data": [1]}`, wantErr: "metadata.gap_seconds"},
		{name: "no data", in: `{"metadata": {"gap_seconds": 60}, "data": []}`, wantErr: "data: must hold"},
		{name: "negative count", in: `{"metadata": {"gap_seconds": 60}, "data": [1, -1]}`, wantErr: "data[1]"},
		{name: "not JSON", in: `nope`, wantErr: "trace t:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := DecodeTrace(strings.NewReader(tt.in), "t")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != tt.want.Name || got.Gap != tt.want.Gap || fmt.Sprint(got.Avail) != fmt.Sprint(tt.want.Avail) {
				t.Errorf("DecodeTrace = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func liveState() State {
	return State{
		Elapsed: time.Hour, Done: 30 * time.Minute, Compute: 10 * time.Hour, Deadline: 20 * time.Hour,
		Overhead: 12 * time.Minute, Tick: time.Minute,
		Pools: []Pool{{ID: "aws/us-west-2a/v100/spot"}, {ID: "aws/us-west-2b/v100/spot", Available: true}},
	}
}

func TestAdviseRejectsABadStateNamingTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*State)
		want   string
	}{
		{"no tick", func(s *State) { s.Tick = 0 }, "state.tick"},
		{"done past compute", func(s *State) { s.Done = 11 * time.Hour }, "state.done"},
		{"warm-up over overhead", func(s *State) { s.Warmup = time.Hour }, "state.warmup"},
		{"past the deadline", func(s *State) { s.Elapsed = 21 * time.Hour }, "state.elapsed"},
		{"current pool unknown", func(s *State) { s.Current = Placement{Kind: Spot, Pool: 5} }, "state.current.pool"},
		{"duplicate pool", func(s *State) { s.Pools[1].ID = s.Pools[0].ID }, "state.pools[1].id"},
		{"checkpoint in no pool", func(s *State) { s.Checkpoint = "aws/eu-west-1a/v100/spot" }, "state.checkpoint"},
		{"negative move", func(s *State) { s.Move.Micros = -1 }, "state.move"},
		{"warm-up over overhead and transfer", func(s *State) { s.Move.Time = time.Minute; s.Warmup = 14 * time.Minute }, "state.warmup"},
		{"negative price", func(s *State) { s.Prices.Spot = -1 }, "state.prices"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := liveState()
			tt.change(&s)
			_, err := Advise(NewGpuq(), s)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

type badPool struct{}

func (badPool) Name() string        { return "bad" }
func (badPool) Decide(State) Action { return spotIn(0, "") }

func TestAdviseRefusesASpotPoolWithoutCapacity(t *testing.T) {
	t.Parallel()
	_, err := Advise(badPool{}, liveState())
	if err == nil || !strings.Contains(err.Error(), "not available") {
		t.Fatalf("err = %v, want one about a pool without capacity", err)
	}
}

func TestByName(t *testing.T) {
	t.Parallel()
	for _, st := range Strategies() {
		got, err := ByName(st.Name())
		if err != nil || got.Name() != st.Name() {
			t.Errorf("ByName(%q) = %v, %v", st.Name(), got, err)
		}
	}
	if _, err := ByName("lucky"); err == nil || !errors.Is(err, err) || !strings.Contains(err.Error(), "greedy") {
		t.Errorf("ByName(lucky) err = %v, want one listing the strategies", err)
	}
}

func ExampleAdvise() {
	s := State{
		Elapsed: 2 * time.Hour, Done: 2 * time.Hour, Compute: 24 * time.Hour, Deadline: 30 * time.Hour,
		Overhead: 12 * time.Minute, Tick: time.Minute,
		Current: Placement{Kind: Spot, Pool: 0},
		Pools: []Pool{
			{ID: "aws/us-east-1c/v100/spot", Available: false},
			{ID: "aws/us-west-2b/v100/spot", Available: true},
		},
	}
	d, err := Advise(NewGpuq(), s)
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Kind, d.PoolID)
	// Output: spot aws/us-west-2b/v100/spot
}
