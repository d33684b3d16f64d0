package spot

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestUniformProgressFollowsTheReferenceRules(t *testing.T) {
	t.Parallel()
	// 20 hours of work due in 40: the uniform line is at half the elapsed
	// time; d is 12 minutes, so 2d ahead of it is 12 minutes of progress.
	base := State{
		Elapsed: 10 * time.Hour, Compute: 20 * time.Hour, Deadline: 40 * time.Hour,
		Overhead: 12 * time.Minute, Tick: 10 * time.Minute,
		Pools: []Pool{{ID: "a"}},
	}
	tests := []struct {
		name    string
		done    time.Duration
		current Kind
		spot    bool
		want    Kind
	}{
		{"idle behind the line, no spot: on-demand", 4 * time.Hour, Wait, false, OnDemand},
		{"idle ahead of the line, no spot: wait", 6 * time.Hour, Wait, false, Wait},
		{"behind the line, spot: take the risk", 4 * time.Hour, Wait, true, Spot},
		{"on on-demand past the hysteresis line, no spot: stay", 6 * time.Hour, OnDemand, false, OnDemand},
		{"on on-demand within 2d of the line, spot: stay", 5*time.Hour + 6*time.Minute, OnDemand, true, OnDemand},
		{"on on-demand past the hysteresis line, spot: leave", 5*time.Hour + 13*time.Minute, OnDemand, true, Spot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := base
			s.Done = tt.done
			s.Current = Placement{Kind: tt.current}
			s.Pools = []Pool{{ID: "a", Available: tt.spot}}
			if got := (UniformProgress{}).Decide(s); got.Kind != tt.want {
				t.Errorf("Decide = %v (%s), want %v", got.Kind, got.Reason, tt.want)
			}
		})
	}
}

func TestUniformProgressTakesOnDemandWithin2dOfTheDeadline(t *testing.T) {
	t.Parallel()
	// 2 hours of work left, 2h20m left, d = 12 minutes: the work left + 2d
	// fills the 14 ticks left, so even an idle job well ahead of the line
	// commits to on-demand.
	s := State{
		Elapsed: 37*time.Hour + 40*time.Minute, Done: 18 * time.Hour, Compute: 20 * time.Hour, Deadline: 40 * time.Hour,
		Overhead: 12 * time.Minute, Tick: 10 * time.Minute, Pools: []Pool{{ID: "a"}},
	}
	if got := (UniformProgress{}).Decide(s); got.Kind != OnDemand {
		t.Errorf("Decide = %v (%s), want on-demand", got.Kind, got.Reason)
	}
}

// unguarded plays Uniform Progress's own rules and counts the decisions the
// shared safety net would have changed while the deadline could be met.
type unguarded struct{ changed *int }

func (unguarded) Name() string { return "uniform-progress-unguarded" }

func (u unguarded) Decide(s State) Action {
	a := UniformProgress{}.decide(s)
	if s.coldTicks(s.Done) <= s.ticksLeft() && !guard(s, a).same(a.Placement) {
		*u.changed++
	}
	return a
}

func TestUniformProgressNeverNeedsTheSharedSafetyNet(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		gap := rapid.SampledFrom([]time.Duration{time.Minute, 10 * time.Minute}).Draw(t, "gap")
		traces := genTraces(t, gap, 10, 120, 3)
		job := genJob(t, gap, len(traces[0].Avail))
		changed := 0
		r, err := Simulate(traces, job, handPrices, unguarded{&changed})
		if err != nil {
			t.Fatal(err)
		}
		if changed > 0 || !r.DeadlineMet {
			t.Fatalf("the safety net changed %d decisions (deadline met: %v)", changed, r.DeadlineMet)
		}
	})
}

func TestKeepOnDemandKeepsOnDemandWhereTheStrategyWouldLeaveIt(t *testing.T) {
	t.Parallel()
	s := lookaheadState(2*time.Hour, OnDemand, Pool{ID: "a", Available: true, History: observed(append(repeat(3, 144, 5), 30)...)})
	g := NewGpuq()
	if a := g.Decide(s); a.Kind != Spot {
		t.Fatalf("gpuq on on-demand with spot up for 5 hours: %v (%s), want spot", a.Kind, a.Reason)
	}
	k := KeepOnDemand{g}
	if a := k.Decide(s); a.Kind != OnDemand || k.Name() != "gpuq" {
		t.Fatalf("%s kept: %v (%s), want on-demand under gpuq's name", k.Name(), a.Kind, a.Reason)
	}
	s.Current = Placement{Kind: Wait}
	if got, want := k.Decide(s), g.Decide(s); got != want {
		t.Fatalf("idle, kept %+v, want gpuq's %+v", got, want)
	}
}
