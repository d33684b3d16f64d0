package spot

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Trace is the spot availability of one pool over time: Avail[k] is the number
// of spot instances that could be held during tick k, a tick lasting Gap. A
// job holding an instance of the pool is preempted at the first tick whose
// value is 0.
type Trace struct {
	Name  string
	Gap   time.Duration
	Avail []int32
}

// Up reports whether a spot instance can be held during tick k.
func (t Trace) Up(k int) bool { return t.Avail[k] > 0 }

// Duration is the time the trace covers.
func (t Trace) Duration() time.Duration { return time.Duration(len(t.Avail)) * t.Gap }

// traceFile is the published JSON layout of the "Can't Be Late" traces.
type traceFile struct {
	Metadata struct {
		GapSeconds *float64 `json:"gap_seconds"`
	} `json:"metadata"`
	Data []int32 `json:"data"`
}

// DecodeTrace reads a trace in the JSON layout
// {"metadata": {"gap_seconds": G}, "data": [n0, n1, ...]}.
func DecodeTrace(r io.Reader, name string) (Trace, error) {
	var f traceFile
	if err := json.NewDecoder(r).Decode(&f); err != nil {
		return Trace{}, fmt.Errorf("trace %s: %w", name, err)
	}
	if f.Metadata.GapSeconds == nil {
		return Trace{}, fmt.Errorf("trace %s: metadata.gap_seconds: missing", name)
	}
	gap := time.Duration(*f.Metadata.GapSeconds * float64(time.Second))
	if gap < time.Millisecond || gap%time.Millisecond != 0 {
		return Trace{}, fmt.Errorf("trace %s: metadata.gap_seconds: must be a positive whole number of milliseconds, got %v", name, *f.Metadata.GapSeconds)
	}
	if len(f.Data) == 0 {
		return Trace{}, fmt.Errorf("trace %s: data: must hold at least one tick", name)
	}
	for k, n := range f.Data {
		if n < 0 {
			return Trace{}, fmt.Errorf("trace %s: data[%d]: must be ≥ 0, got %d", name, k, n)
		}
	}
	return Trace{Name: name, Gap: gap, Avail: f.Data}, nil
}
