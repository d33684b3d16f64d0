package queue

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/google/uuid"
)

// MaxAfter bounds the jobs one spec may run after.
const MaxAfter = 1000

// ValidJobID reports whether s is a job id in the form gpuq prints ids in.
func ValidJobID(s string) bool {
	id, err := uuid.Parse(s)
	return err == nil && id.String() == s
}

// Dependency is a job another one runs after, as the system of record
// holds it.
type Dependency struct {
	ID    uuid.UUID `json:"job_id"`
	Name  string    `json:"name"`
	State JobState  `json:"state"`
	// Project is the job's project: a job runs after jobs of its own
	// project only.
	Project string `json:"-"`
	// Reason is why it ended as it did, for Sequence.
	Reason string `json:"-"`
}

// Readiness is where a job that runs after others stands.
type Readiness int

const (
	// Ready: every job it runs after has succeeded; it may be placed.
	Ready Readiness = iota
	// Waiting: some job it runs after has not finished.
	Waiting
	// Never: a job it runs after ended otherwise, or is not a job of its
	// project; it cannot run until that changes.
	Never
)

// Sequence says where job, of project and spec, stands given deps, the
// jobs of the ids spec.after and spec.after_ended name found in the system
// of record (a job not found is not among them), with why: for Waiting,
// what its trail says; for Never, the reason it is not run.
func Sequence(job uuid.UUID, project string, spec *Spec, deps []Dependency) (Readiness, string) {
	byID := make(map[string]Dependency, len(deps))
	for _, d := range deps {
		byID[d.ID.String()] = d
	}
	var unfinished []string
	var last Dependency
	var toSucceed, toEnd int
	for _, l := range []struct {
		field string
		ids   []string
		ended bool
	}{{"spec.after", spec.After, false}, {"spec.after_ended", spec.AfterEnded, true}} {
		for _, a := range l.ids {
			d, ok := byID[a]
			switch {
			case a == job.String():
				return Never, l.field + " names the job itself"
			case !ok || d.Project != project:
				return Never, fmt.Sprintf("job %s it runs after is not a job of project %s", a, project)
			case d.State == StateSucceeded, l.ended && d.State.Terminal():
			case d.State == StateCancelled && neverReason.MatchString(d.Reason):
				// Cancelled for a job it ran after: that one is what to
				// retry (with the jobs after it, this one among them).
				return Never, d.Reason
			case d.State.Terminal():
				return Never, fmt.Sprintf("job %s%s it runs after ended %s: retry it and the jobs after it (gpuq retry --downstream %[1]s)", a, NameSuffix(d.Name), d.State)
			default:
				unfinished, last = append(unfinished, fmt.Sprintf("%s%s %s", a, NameSuffix(d.Name), d.State)), d
				if l.ended {
					toEnd++
				} else {
					toSucceed++
				}
			}
		}
	}
	if len(unfinished) == 0 {
		return Ready, ""
	}
	to := "to succeed"
	switch {
	case toSucceed == 0:
		to = "to end"
	case toEnd > 0:
		to = "to succeed (spec.after) or end (spec.after_ended)"
	}
	if len(spec.After)+len(spec.AfterEnded) == 1 {
		return Waiting, fmt.Sprintf("waiting for job %s%s %s (it is %s)", last.ID, NameSuffix(last.Name), to, last.State)
	}
	const shown = 3
	msg := fmt.Sprintf("waiting for %d of the %d jobs it runs after %s: %s", len(unfinished), len(spec.After)+len(spec.AfterEnded), to,
		strings.Join(unfinished[:min(shown, len(unfinished))], ", "))
	if len(unfinished) > shown {
		msg += fmt.Sprintf(" and %d more", len(unfinished)-shown)
	}
	return Waiting, msg
}

// neverReason matches the reason a job cancelled for a job it runs after
// was given, naming the job to retry.
var neverReason = regexp.MustCompile(`^job ([0-9a-f-]{36})( \(.*\))? it runs after ended (failed|dead|cancelled|rejected): retry it and the jobs after it \(gpuq retry --downstream ([0-9a-f-]{36})\)$`)

// NameSuffix is " (name)" for a job with a name, "" for one without.
func NameSuffix(name string) string {
	if name == "" {
		return ""
	}
	return " (" + name + ")"
}

// RunsAfter reports whether the spec names jobs it runs after.
func (s *Spec) RunsAfter() bool {
	return len(s.After)+len(s.AfterEnded) > 0
}

// AfterIDs returns the ids of every job the spec runs after, spec.after's
// then spec.after_ended's; Validate has checked them.
func (s *Spec) AfterIDs() []uuid.UUID {
	return ParseIDs(s.After, s.AfterEnded)
}

// ParseIDs returns the ids of lists, in their order; Validate has checked
// them.
func ParseIDs(lists ...[]string) []uuid.UUID {
	var ids []uuid.UUID
	for _, l := range lists {
		for _, a := range l {
			if id, err := uuid.Parse(a); err == nil {
				ids = append(ids, id)
			}
		}
	}
	return ids
}
