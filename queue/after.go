package queue

import (
	"fmt"
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

// Sequence says where job, of project and running after the jobs after
// names, stands given deps, the jobs of those ids found in the system of
// record (a job not found is not among them), with why: for Waiting, what
// its trail says; for Never, the reason it is not run.
func Sequence(job uuid.UUID, project string, after []string, deps []Dependency) (Readiness, string) {
	byID := make(map[string]Dependency, len(deps))
	for _, d := range deps {
		byID[d.ID.String()] = d
	}
	var unfinished []string
	var last Dependency
	for _, a := range after {
		d, ok := byID[a]
		switch {
		case a == job.String():
			return Never, "spec.after names the job itself"
		case !ok || d.Project != project:
			return Never, fmt.Sprintf("job %s it runs after is not a job of project %s", a, project)
		case d.State == StateSucceeded:
		case d.State.Terminal():
			return Never, fmt.Sprintf("job %s%s it runs after ended %s: retry it (gpuq retry %[1]s), then this job", a, NameSuffix(d.Name), d.State)
		default:
			unfinished, last = append(unfinished, fmt.Sprintf("%s%s %s", a, NameSuffix(d.Name), d.State)), d
		}
	}
	if len(unfinished) == 0 {
		return Ready, ""
	}
	if len(after) == 1 {
		return Waiting, fmt.Sprintf("waiting for job %s%s to succeed (it is %s)", last.ID, NameSuffix(last.Name), last.State)
	}
	const shown = 3
	msg := fmt.Sprintf("waiting for %d of the %d jobs it runs after to succeed: %s", len(unfinished), len(after),
		strings.Join(unfinished[:min(shown, len(unfinished))], ", "))
	if len(unfinished) > shown {
		msg += fmt.Sprintf(" and %d more", len(unfinished)-shown)
	}
	return Waiting, msg
}

// NameSuffix is " (name)" for a job with a name, "" for one without.
func NameSuffix(name string) string {
	if name == "" {
		return ""
	}
	return " (" + name + ")"
}

// AfterIDs returns the ids spec.after names; Validate has checked them.
func AfterIDs(after []string) []uuid.UUID {
	ids := make([]uuid.UUID, 0, len(after))
	for _, a := range after {
		if id, err := uuid.Parse(a); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}
