package canary

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)

var (
	passed = Report{OK: true}
	failed = Report{Checks: []Result{{Name: CheckDriver, Expected: "550.*", Found: "535.104.05", Status: Fail}}}
)

func newGate(t testing.TB, s Schedule) *Gate {
	t.Helper()
	g, err := NewGate(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGateRunsOnceBeforeTheFirstJob(t *testing.T) {
	t.Parallel()
	g := newGate(t, Schedule{})
	if !g.Due(t0) || g.MayPull(t0) || g.State() != Unchecked {
		t.Fatalf("new gate: due %v, may pull %v, state %s; want due, no pull, unchecked", g.Due(t0), g.MayPull(t0), g.State())
	}
	g.Observe(t0, passed)
	later := t0.Add(24 * time.Hour)
	for range 1000 {
		g.JobDone()
	}
	if g.Due(later) || !g.MayPull(later) {
		t.Fatal("with no schedule the canary ran again after the first pass")
	}
	if _, ok := g.NextDue(); ok {
		t.Error("NextDue reported a time with no time schedule")
	}
}

func TestGateReRunsEveryNJobs(t *testing.T) {
	t.Parallel()
	g := newGate(t, Schedule{EveryJobs: 3})
	g.Observe(t0, passed)
	for i := 1; i <= 3; i++ {
		if g.Due(t0) {
			t.Fatalf("due after %d jobs, want after 3", i-1)
		}
		g.JobDone()
	}
	if !g.Due(t0) || g.MayPull(t0) {
		t.Fatal("not due after 3 jobs")
	}
	g.Observe(t0, passed)
	if g.Due(t0) {
		t.Fatal("a new pass did not reset the job count")
	}
}

func TestGateReRunsEveryT(t *testing.T) {
	t.Parallel()
	g := newGate(t, Schedule{Every: 15 * time.Minute})
	g.Observe(t0, passed)
	if g.Due(t0.Add(15*time.Minute - time.Nanosecond)) {
		t.Fatal("due before 15 minutes")
	}
	if !g.Due(t0.Add(15 * time.Minute)) {
		t.Fatal("not due at 15 minutes")
	}
	if at, ok := g.NextDue(); !ok || !at.Equal(t0.Add(15*time.Minute)) {
		t.Errorf("NextDue = %v, %v", at, ok)
	}
}

func TestGateWaitsRetryAfterAFailure(t *testing.T) {
	t.Parallel()
	g := newGate(t, Schedule{RetryAfter: 2 * time.Minute, QuarantineAfter: 3})
	if st := g.Observe(t0, failed); st != Failing {
		t.Fatalf("state = %s, want failing", st)
	}
	if g.MayPull(t0.Add(time.Hour)) {
		t.Fatal("a failing node may pull")
	}
	if g.Due(t0.Add(time.Minute)) || !g.Due(t0.Add(2*time.Minute)) {
		t.Fatal("retry not due exactly RetryAfter after the failure")
	}
	if !strings.Contains(g.Reason(), "535.104.05") {
		t.Errorf("reason %q does not say what drifted", g.Reason())
	}
	if st := g.Observe(t0.Add(2*time.Minute), passed); st != Healthy || g.ConsecutiveFailures() != 0 || !g.MayPull(t0.Add(2*time.Minute)) {
		t.Fatalf("a pass after a failure left state %s, %d consecutive", st, g.ConsecutiveFailures())
	}
	if runs, fails := g.Counts(); runs != 2 || fails != 1 {
		t.Errorf("counts = %d runs, %d failures; want 2, 1", runs, fails)
	}
}

func TestGateQuarantinesAfterNConsecutiveFailures(t *testing.T) {
	t.Parallel()
	g := newGate(t, Schedule{QuarantineAfter: 3})
	now := t0
	for _, r := range []Report{failed, failed, passed, failed, failed} {
		g.Observe(now, r)
		now = now.Add(time.Hour)
	}
	if g.State() != Failing {
		t.Fatalf("state = %s after 2 consecutive failures, want failing", g.State())
	}
	if st := g.Observe(now, failed); st != Quarantined {
		t.Fatalf("state = %s after 3 consecutive failures, want quarantined", st)
	}
	if g.Due(now.Add(1000*time.Hour)) || g.MayPull(now.Add(1000*time.Hour)) {
		t.Fatal("a quarantined node is due or may pull")
	}
	if st := g.Observe(now, passed); st != Quarantined {
		t.Fatal("a pass lifted the quarantine")
	}
	if !strings.HasPrefix(g.Reason(), "node quarantined after 3 canary failures") {
		t.Errorf("reason = %q", g.Reason())
	}
}

// Whatever the sequence of results, the node is quarantined exactly when the
// results contain QuarantineAfter failures in a row, and may pull only after
// a pass.
func TestGateQuarantineProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 5).Draw(t, "quarantineAfter")
		results := rapid.SliceOf(rapid.Bool()).Draw(t, "passes")
		g, err := NewGate(Schedule{QuarantineAfter: n})
		if err != nil {
			t.Fatal(err)
		}
		run, wantQuarantine := 0, false
		for i, ok := range results {
			r := failed
			if ok {
				r = passed
			}
			now := t0.Add(time.Duration(i) * time.Hour)
			g.Observe(now, r)
			if ok {
				run = 0
			} else {
				run++
			}
			wantQuarantine = wantQuarantine || run >= n
			if (g.State() == Quarantined) != wantQuarantine {
				t.Fatalf("after %v: state %s, want quarantined=%v", results[:i+1], g.State(), wantQuarantine)
			}
			if g.MayPull(now) != (!wantQuarantine && ok) {
				t.Fatalf("after %v: may pull = %v", results[:i+1], g.MayPull(now))
			}
		}
	})
}

func TestScheduleValidateNamesTheField(t *testing.T) {
	t.Parallel()
	for field, s := range map[string]Schedule{
		"every_jobs":       {EveryJobs: -1},
		"every":            {Every: -time.Second},
		"retry_after":      {RetryAfter: -time.Second},
		"quarantine_after": {QuarantineAfter: -1},
	} {
		_, err := NewGate(s)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("NewGate(%+v) = %v, want a FieldError on %s", s, err, field)
		}
	}
}

func TestNodeIDPrefersTheInstanceID(t *testing.T) {
	t.Parallel()
	if got := NodeID(" i-0abc123 "); got != "i-0abc123" {
		t.Errorf("NodeID(instance) = %q", got)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Skip("no host name here")
	}
	if got := NodeID(""); got != host {
		t.Errorf("NodeID(\"\") = %q, want the host name %q", got, host)
	}
}
