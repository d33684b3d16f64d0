package queue

import (
	"time"

	"github.com/google/uuid"
)

// NewJob is a validated submission about to be recorded.
type NewJob struct {
	ID   uuid.UUID
	Spec *Spec
}

// PlacedJob is a placement about to be recorded.
type PlacedJob struct {
	JobID     uuid.UUID
	Placement Placement
}

// ArchiveRecord describes a packed archive in a checkpoint store.
type ArchiveRecord struct {
	Bytes    int64
	SHA256   string
	Region   string
	StoreURI string
}

// JobCount is how many jobs of a project are in a state.
type JobCount struct {
	Project string
	State   JobState
	Jobs    int64
}

// ListFilter narrows List; zero values match everything.
type ListFilter struct {
	State   JobState
	Project string
	Limit   int
}

// Unsettled is a job the reconciler must look at.
type Unsettled struct {
	ID               uuid.UUID
	State            JobState
	Pool             string
	PlacementVersion int
}

// BudgetGuard is a project budget that committing a placement re-checks
// against the spend recorded at that moment, so that spend which accrued
// after the decision cannot push the project over its budget: the spend of
// Project's attempts started since Since, each currency converted at Rates
// (base micros per unit, rounded down), plus CostMicros must not exceed
// LimitMicros. Reason is why the job is rejected when it does.
type BudgetGuard struct {
	Project     string
	Since       time.Time
	LimitMicros int64
	CostMicros  int64
	Rates       map[string]int64
	Reason      string
}

// Decided is a batch of placement decisions to commit: the placements to
// record and the jobs to reject, with the reason.
type Decided struct {
	Placed   []PlacedJob
	Rejected map[uuid.UUID]string
	// Waiting holds the jobs to record as waiting for the jobs they run
	// after, each with what its trail says of them.
	Waiting map[uuid.UUID]string
}

// Page asks for one page of a project-scoped listing, newest first; zero
// values match everything.
type Page struct {
	// Projects the listing is limited to; empty lists nothing,
	// AllProjects among them lists every project's jobs.
	Projects []string
	State    JobState
	// LabelKey and LabelValue select jobs whose spec.labels has that entry.
	LabelKey, LabelValue string
	// Since keeps jobs submitted at or after it.
	Since time.Time
	// Pool keeps the jobs placed on that pool (their latest placement's).
	Pool string
	// RunsAfter, when set, keeps the jobs whose spec.after or
	// spec.after_ended names that job.
	RunsAfter uuid.UUID
	// After continues a listing after this job (its submission time and id).
	AfterAt time.Time
	AfterID uuid.UUID
	Limit   int
}

// LedgerEntry is one line of a project's budget ledger: a job with its
// current placement's provider, region and estimate, and what its attempts
// have accrued in one currency.
type LedgerEntry struct {
	JobID            uuid.UUID
	Project          string
	Name             string
	State            JobState
	Provider         string
	Region           string
	Pool             string
	EstimateMicros   int64
	EstimateCurrency string
	Currency         string
	AccruedMicros    int64
}
