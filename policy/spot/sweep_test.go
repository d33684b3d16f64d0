package spot

import (
	"strings"
	"testing"
	"time"
)

func TestSweepStartsAtTheOffsetAndEveryStep(t *testing.T) {
	t.Parallel()
	// Twelve one-minute ticks and a 4-minute deadline: starts 0, 3 and 6 fit
	// (9 would end past the trace); from an offset of 2: 2, 5 and 8.
	sc := []Scenario{{Name: "s", Traces: []Trace{trace("a", time.Minute, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1)}}}
	tests := []struct {
		name   string
		offset time.Duration
		jobs   int
	}{
		{"from the start", 0, 3},
		{"shifted", 2 * time.Minute, 3},
		{"shifted past the last fit", 9 * time.Minute, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			grid := Grid{Computes: []time.Duration{2 * time.Minute}, Slacks: []float64{1}, Overheads: []time.Duration{0},
				StartStep: 3 * time.Minute, StartOffset: tt.offset}
			rows, err := Sweep(sc, grid, handPrices, []Strategy{Greedy{}}, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rows[0].Jobs != tt.jobs || rows[0].DeadlineMet != tt.jobs {
				t.Errorf("sweep = %+v, want %d jobs, all met", rows[0], tt.jobs)
			}
		})
	}
	_, err := Sweep(sc, Grid{StartStep: time.Minute, StartOffset: -time.Minute}, handPrices, nil, 1, nil)
	if err == nil || !strings.Contains(err.Error(), "grid.start_offset") {
		t.Errorf("err = %v, want one naming grid.start_offset", err)
	}
}
