package canary

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
)

// Recorder stores canary reports per node; the worker's PostgreSQL store
// implements it.
type Recorder interface {
	RecordCanary(ctx context.Context, nodeID string, r Report) error
}

// NodeID names the node a worker runs on: the provider's instance id where
// known, else the host name.
func NodeID(instanceID string) string {
	if id := strings.TrimSpace(instanceID); id != "" {
		return id
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		return host
	}
	return "unknown-host"
}

// Default schedule values that Schedule.WithDefaults fills in.
const (
	DefaultQuarantineAfter = 3
	DefaultRetryAfter      = time.Minute
)

// Schedule says when a worker reruns its canary and when it gives up on its
// node. A zero field disables that trigger, except where a default is given.
type Schedule struct {
	// EveryJobs reruns the canary after this many jobs.
	EveryJobs int `mapstructure:"every_jobs" json:"every_jobs,omitempty" yaml:"every_jobs,omitempty"`
	// Every reruns the canary once this long has passed since the last run.
	Every time.Duration `mapstructure:"every" json:"every,omitempty" yaml:"every,omitempty"`
	// RetryAfter is how long a worker whose canary failed waits before trying
	// again. Default: 1m.
	RetryAfter time.Duration `mapstructure:"retry_after" json:"retry_after,omitempty" yaml:"retry_after,omitempty"`
	// QuarantineAfter is the number of consecutive failures that quarantine
	// the node. Default: 3.
	QuarantineAfter int `mapstructure:"quarantine_after" json:"quarantine_after,omitempty" yaml:"quarantine_after,omitempty"`
}

// WithDefaults returns s with its unset fields given their defaults.
func (s Schedule) WithDefaults() Schedule {
	if s.RetryAfter == 0 {
		s.RetryAfter = DefaultRetryAfter
	}
	if s.QuarantineAfter == 0 {
		s.QuarantineAfter = DefaultQuarantineAfter
	}
	return s
}

// Validate reports the first invalid field as a *FieldError.
func (s Schedule) Validate() error {
	switch {
	case s.EveryJobs < 0:
		return &FieldError{Field: "every_jobs", Problem: fmt.Sprintf("must be ≥ 0, got %d", s.EveryJobs)}
	case s.Every < 0:
		return &FieldError{Field: "every", Problem: fmt.Sprintf("must be ≥ 0, got %s", s.Every)}
	case s.RetryAfter < 0:
		return &FieldError{Field: "retry_after", Problem: fmt.Sprintf("must be ≥ 0, got %s", s.RetryAfter)}
	case s.QuarantineAfter < 0:
		return &FieldError{Field: "quarantine_after", Problem: fmt.Sprintf("must be ≥ 1 (0 for the default %d), got %d", DefaultQuarantineAfter, s.QuarantineAfter)}
	}
	return nil
}

// State is where a node stands with its canary.
type State string

const (
	// Unchecked: the canary has not run yet; the worker may not pull.
	Unchecked State = "unchecked"
	// Healthy: the last canary passed; the worker may pull.
	Healthy State = "healthy"
	// Failing: the last canary failed; the worker may not pull and retries
	// after Schedule.RetryAfter.
	Failing State = "failing"
	// Quarantined: Schedule.QuarantineAfter canaries in a row failed; the
	// worker stops pulling for good and its node should be replaced.
	Quarantined State = "quarantined"
)

// Gate decides when the worker runs its canary and whether it may pull work.
// It holds no clock: every decision takes the current time. It is not safe
// for concurrent use; the worker's pull loop owns it.
type Gate struct {
	s                Schedule
	state            State
	lastRun          time.Time
	jobsSince        int
	consecutiveFails int
	runs, failures   int
	last             Report
}

// NewGate returns a gate that has not seen a canary yet.
func NewGate(s Schedule) (*Gate, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &Gate{s: s.WithDefaults(), state: Unchecked}, nil
}

// Due reports whether the canary must run before the next pull: before the
// first job, after EveryJobs jobs or Every time since the last run while
// healthy, and after RetryAfter while failing. A quarantined node is never due.
func (g *Gate) Due(now time.Time) bool {
	switch g.state {
	case Unchecked:
		return true
	case Failing:
		return !now.Before(g.lastRun.Add(g.s.RetryAfter))
	case Healthy:
		return (g.s.EveryJobs > 0 && g.jobsSince >= g.s.EveryJobs) ||
			(g.s.Every > 0 && !now.Before(g.lastRun.Add(g.s.Every)))
	}
	return false
}

// NextDue is when the canary falls due by time, so that an idle or failing
// worker knows how long to wait; ok is false when no time will make it due
// (quarantined, or healthy with Every unset).
func (g *Gate) NextDue() (at time.Time, ok bool) {
	switch {
	case g.state == Unchecked:
		return time.Time{}, true
	case g.state == Failing:
		return g.lastRun.Add(g.s.RetryAfter), true
	case g.state == Healthy && g.s.Every > 0:
		return g.lastRun.Add(g.s.Every), true
	}
	return time.Time{}, false
}

// MayPull reports whether the worker may take a job now: the last canary
// passed and none is due.
func (g *Gate) MayPull(now time.Time) bool { return g.state == Healthy && !g.Due(now) }

// JobDone counts a finished job towards Schedule.EveryJobs.
func (g *Gate) JobDone() { g.jobsSince++ }

// Observe records a canary report taken at now and returns the new state.
func (g *Gate) Observe(now time.Time, r Report) State {
	if g.state == Quarantined {
		return g.state
	}
	g.lastRun, g.jobsSince, g.last = now, 0, r
	g.runs++
	if r.OK {
		g.consecutiveFails = 0
		g.state = Healthy
		return g.state
	}
	g.failures++
	g.consecutiveFails++
	g.state = Failing
	if g.consecutiveFails >= g.s.QuarantineAfter {
		g.state = Quarantined
	}
	return g.state
}

// State is the gate's current state.
func (g *Gate) State() State { return g.state }

// ConsecutiveFailures is the number of canaries that failed since the last
// one that passed.
func (g *Gate) ConsecutiveFailures() int { return g.consecutiveFails }

// Counts are the canaries run and failed since the gate was made.
func (g *Gate) Counts() (runs, failures int) { return g.runs, g.failures }

// Last is the most recent report observed.
func (g *Gate) Last() Report { return g.last }

// Reason says why the worker may not pull, for its log and its node record;
// it is empty while healthy.
func (g *Gate) Reason() string {
	switch g.state {
	case Unchecked:
		return "canary has not run yet"
	case Failing:
		return fmt.Sprintf("canary failed (%d in a row, quarantine at %d): %s", g.consecutiveFails, g.s.QuarantineAfter, g.last.Summary())
	case Quarantined:
		return fmt.Sprintf("node quarantined after %d canary failures in a row: %s", g.consecutiveFails, g.last.Summary())
	}
	return ""
}
