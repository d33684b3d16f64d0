package queue

import (
	"time"

	"github.com/google/uuid"
)

// JobState is where a job is in its life; it mirrors the job_state enum.
type JobState string

const (
	// StatePending: recorded by the scheduler, not yet placed.
	StatePending JobState = "pending"
	// StateWaiting: recorded, and not placed until every job its spec's
	// after names has succeeded.
	StateWaiting JobState = "waiting"
	// StatePlaced: placed and published to its pool; waiting for a worker.
	StatePlaced JobState = "placed"
	// StateRunning: claimed by a worker under the current attempt.
	StateRunning JobState = "running"
	// StateSucceeded: exited 0 and its completion was recorded. Terminal.
	StateSucceeded JobState = "succeeded"
	// StateFailed: exited non-zero more often than retries.max_errors allow. Terminal.
	StateFailed JobState = "failed"
	// StateCancelled: cancelled by a user. Terminal.
	StateCancelled JobState = "cancelled"
	// StateRejected: no placement satisfies it (residency, budget, cards). Terminal.
	StateRejected JobState = "rejected"
	// StateDead: preempted, lost or handed back after a host error more often
	// than retries.max_preemptions allow. Terminal.
	StateDead JobState = "dead"
)

// States lists every job state in the order of a job's life, the
// terminal ones last.
var States = []JobState{StatePending, StateWaiting, StatePlaced, StateRunning,
	StateSucceeded, StateFailed, StateCancelled, StateRejected, StateDead}

// JobCounts counts the jobs a listing's filters match, by state: how far a
// sweep has come.
type JobCounts struct {
	// Total is the number of jobs matched.
	Total int64 `json:"total"`
	// States holds every state, with 0 for those no job is in.
	States map[JobState]int64 `json:"states"`
}

// NoJobs is the count of no job: every state with 0.
func NoJobs() JobCounts {
	c := JobCounts{States: make(map[JobState]int64, len(States))}
	for _, s := range States {
		c.States[s] = 0
	}
	return c
}

// Finished is the number of jobs counted in a terminal state.
func (c JobCounts) Finished() int64 {
	var n int64
	for s, k := range c.States {
		if s.Terminal() {
			n += k
		}
	}
	return n
}

// Add adds o's counts to c's.
func (c *JobCounts) Add(o JobCounts) {
	if c.States == nil {
		*c = NoJobs()
	}
	for _, s := range States {
		c.States[s] += o.States[s]
	}
	c.Total += o.Total
}

// Terminal reports whether the job has finished: no further state change
// happens unless a user retries it (only a success is final for good; see
// Retryable).
func (s JobState) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateCancelled, StateRejected, StateDead:
		return true
	}
	return false
}

// Retryable reports whether a user may run a finished job again: a job
// that failed, died, was cancelled or was rejected. A job succeeds once.
func (s JobState) Retryable() bool {
	switch s {
	case StateFailed, StateCancelled, StateRejected, StateDead:
		return true
	}
	return false
}

// NotRetryableError is what retrying a job returns when its state is not
// retryable (it has not finished, or it succeeded) or changed while the
// retry was placed.
type NotRetryableError struct {
	State JobState
}

func (e *NotRetryableError) Error() string {
	switch {
	case e.State == StateSucceeded:
		return "it succeeded, and a job succeeds once; submit it again to run it again"
	case !e.State.Terminal():
		return "it has not finished: " + string(e.State)
	}
	return "it changed meanwhile (now " + string(e.State) + "); try again"
}

// Job is the system of record's view of a job.
type Job struct {
	ID               uuid.UUID  `json:"id"`
	Project          string     `json:"project"`
	Name             string     `json:"name"`
	IdempotencyKey   string     `json:"idempotency_key,omitempty"`
	Spec             *Spec      `json:"spec"`
	State            JobState   `json:"state"`
	Attempt          int        `json:"attempt"`
	Errors           int        `json:"errors"`
	Preemptions      int        `json:"preemptions"`
	PlacementVersion int        `json:"placement_version"`
	Pool             string     `json:"pool,omitempty"`
	ExitCode         *int       `json:"exit_code,omitempty"`
	Reason           string     `json:"reason,omitempty"`
	LeaseExpiresAt   *time.Time `json:"lease_expires_at,omitempty"`
	SubmittedAt      time.Time  `json:"submitted_at"`
	UpdatedAt        time.Time  `json:"updated_at"`
	FinalizedAt      *time.Time `json:"finalized_at,omitempty"`
}

// PoolLine is where a placed job stands in its pool's line. The pool's
// workers take its run messages in the order they were placed, so Ahead is
// a count of jobs, not a promise of order: a job handed back with a retry
// delay waits out the delay wherever it stands.
type PoolLine struct {
	Pool string `json:"pool"`
	// Ahead counts the pool's placed jobs that have waited longer: placed
	// or handed back before it.
	Ahead int `json:"ahead"`
	// Running counts the pool's jobs running now.
	Running int `json:"running"`
	// Workers counts the pool's live workers the control plane hears;
	// absent where no liveness monitor listens.
	Workers *int `json:"workers,omitempty"`
	// Paused counts those of the Workers that take no work for a while
	// after host errors in a row (their machine failed jobs around their
	// runs); absent with Workers.
	Paused *int `json:"paused,omitempty"`
}

// Attempt is one claim of a job by a worker.
type Attempt struct {
	Attempt     int        `json:"attempt"`
	WorkerID    string     `json:"worker_id"`
	Host        string     `json:"host"`
	PID         int        `json:"pid"`
	Pool        string     `json:"pool"`
	StartedAt   time.Time  `json:"started_at"`
	HeartbeatAt time.Time  `json:"heartbeat_at"`
	EndedAt     *time.Time `json:"ended_at,omitempty"`
	Outcome     string     `json:"outcome,omitempty"`
	ExitCode    *int       `json:"exit_code,omitempty"`
	NodeID      string     `json:"node_id,omitempty"`
	CanaryRunID int64      `json:"canary_run_id,omitempty"`
}

// Attempt outcomes.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	OutcomeRetry     = "error"
	OutcomePreempted = "preempted"
	OutcomeLost      = "lost"
	OutcomeFenced    = "fenced"
	OutcomeCancelled = "cancelled"
	OutcomeTimeout   = "timeout"
	// OutcomeOverBudget: the job was stopped when its spend reached its
	// own budget.total or a budget of its project.
	OutcomeOverBudget = "over_budget"
	// OutcomeMoved: the control plane asked the worker to hand the job back
	// with a final checkpoint so that it moves to another pool (from
	// on-demand back to spot, as the spot strategy advised). It counts as
	// neither an error nor a preemption.
	OutcomeMoved = "moved"
	// OutcomeShutdown: the worker was told to stop (gpuq dev stopping,
	// Ctrl-C, an operator's SIGINT) rather than losing its machine; it
	// handed the job back with a final checkpoint, and the job resumes in
	// its pool. It counts as neither an error nor a preemption, and the
	// pool's preemption record does not count it.
	OutcomeShutdown = "shutdown"
	// OutcomeHostError: something on the worker's own machine failed
	// around the run (preparing the attempt's directories, choosing its
	// uid, restoring its checkpoint, uploading its outputs); the job did
	// nothing wrong and its machine was not taken away. It counts against
	// the job's retries.max_preemptions, which bounds a job that breaks
	// every worker, but not in the pool's preemption record, and the job
	// stays in its pool.
	OutcomeHostError = "host_error"
)

// JobInPool is a job and the pool it is placed in.
type JobInPool struct {
	ID   uuid.UUID
	Pool string
}

// Checkpoint is one committed checkpoint archive.
type Checkpoint struct {
	JobID     uuid.UUID `json:"job_id"`
	Seq       int       `json:"seq"`
	Attempt   int       `json:"attempt"`
	Bytes     int64     `json:"bytes"`
	SHA256    string    `json:"sha256"`
	Region    string    `json:"region"`
	StoreURI  string    `json:"store_uri"`
	CreatedAt time.Time `json:"created_at"`
}

// Event is one entry of a job's audit trail; the same value is published on
// gpuq.events.<job> after it is recorded.
type Event struct {
	JobID    uuid.UUID `json:"job_id"`
	At       time.Time `json:"at"`
	State    JobState  `json:"state"`
	Attempt  int       `json:"attempt"`
	Message  string    `json:"message,omitempty"`
	ExitCode *int      `json:"exit_code,omitempty"`
	// Outcome is the outcome of the attempt that ended with this event.
	Outcome string `json:"outcome,omitempty"`
	// Superseded marks an end (a terminal state) that is not the job's
	// last: a user retried the job after it. Whoever follows a job's
	// events until it finishes reads on past such an end.
	Superseded bool `json:"superseded,omitempty"`
}

// Ends reports whether ev is where a job finished: a terminal state that
// no retry superseded.
func (ev Event) Ends() bool { return ev.State.Terminal() && !ev.Superseded }

// HandedBackPreempted reports whether ev is a job going back to placed after
// a preempted attempt, or one handed back to move: the event after which the
// replacer looks for the job's plan B.
func (ev Event) HandedBackPreempted() bool {
	return ev.State == StatePlaced && (ev.Outcome == OutcomePreempted || ev.Outcome == OutcomeMoved)
}

// Placement is where the scheduler put a job and why.
type Placement struct {
	Version int    `json:"version"`
	Pool    string `json:"pool"`
	Region  string `json:"region"`
	// Residency is the class the job is bound to ("" when unconstrained) and
	// Countries its members; workers refuse jobs outside it.
	Residency string   `json:"residency,omitempty"`
	Countries []string `json:"countries,omitempty"`
	// PriceMicros per hour in Currency: the chosen offer's price, which the
	// attempts under this placement accrue.
	PriceMicros int64  `json:"price_micros,omitempty"`
	Currency    string `json:"currency,omitempty"`
	// EstimateMicros in EstimateCurrency is the job's estimated cost on
	// the chosen offer, which it reserves against its project's budgets
	// until it finishes; Provider is the offer's provider.
	EstimateMicros   int64  `json:"estimate_micros,omitempty"`
	EstimateCurrency string `json:"estimate_currency,omitempty"`
	Provider         string `json:"provider,omitempty"`
	// Decision is the placement policy's explanation in its compact form
	// (policy.Compact): the chosen offer, the ranked plan B and the
	// rejections counted by reason with a few examples each.
	Decision []byte `json:"-"`
	// Replay, when not nil, is what the decision was made from, stored with
	// it so that the full decision can be recomputed on demand.
	Replay *DecisionReplay `json:"-"`
	// Guards are re-checked against the spend recorded when the placement
	// is committed; a placement failing one is not recorded.
	Guards []BudgetGuard `json:"-"`
}

// RunningSpend is a running job's cost so far: what all its attempts
// accrued, in micros per currency, with its spec's budget.total.
type RunningSpend struct {
	JobID       uuid.UUID
	Project     string
	Attempt     int
	BudgetTotal string
	Micros      map[string]int64
}
