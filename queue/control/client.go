package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
)

// ClientStore is what the client operations read and change in the system
// of record.
type ClientStore interface {
	Job(ctx context.Context, id uuid.UUID) (*queue.Job, error)
	Attempts(ctx context.Context, id uuid.UUID) ([]queue.Attempt, error)
	EventsOf(ctx context.Context, id uuid.UUID) ([]queue.Event, error)
	Checkpoints(ctx context.Context, id uuid.UUID) ([]queue.Checkpoint, error)
	LatestPlacement(ctx context.Context, id uuid.UUID) (*queue.Placement, error)
	PoolLine(ctx context.Context, job *queue.Job) (*queue.PoolLine, error)
	Cancel(ctx context.Context, id uuid.UUID, reason string) error
	Retry(ctx context.Context, job *queue.Job, p queue.Placement, note string, fresh bool) error
	Result(ctx context.Context, id uuid.UUID) (*queue.ArchiveRecord, error)
	// MissingSecrets returns those of names that project does not hold.
	MissingSecrets(ctx context.Context, project string, names []string) ([]string, error)
	Dependencies(ctx context.Context, ids []uuid.UUID) ([]queue.Dependency, error)
	Dependents(ctx context.Context, job *queue.Job, limit int) ([]queue.Dependency, error)
	RetryWaiting(ctx context.Context, job *queue.Job, note, msg string, fresh bool) error
	LatestNotification(ctx context.Context, job uuid.UUID) (*queue.Notification, error)
	JobSpend(ctx context.Context, job uuid.UUID) (map[string]int64, error)
}

// Client carries out what users ask of jobs: status, list, wait, logs,
// cancel, retry and results. Store answers from the system of record, JS
// follows events and reads logs, NATS tells workers about cancellations,
// and Placer and Runs place and dispatch a retried job.
type Client struct {
	Store ClientStore
	JS    queue.OrderedConsumers
	NATS  queue.CoreNATS
	// RecordWait is how long Job waits for a just-submitted job to be
	// recorded. Default 30s.
	RecordWait time.Duration
	// Workers, when set, counts the live workers of each pool, for the
	// line of a placed job.
	Workers *LiveWorkers
	// Placer places a retried job and Runs publishes its run message; a
	// client without them refuses retries.
	Placer Placer
	Runs   RunPublisher
	// Workdirs, when set, is asked whether a retried job's working
	// directory is still stored: a retry of a job whose directory is gone
	// is refused, saying how to bring it back, rather than placed to fail.
	Workdirs *Workdirs
}

// JobStatus is a job with its attempts, latest checkpoint, placement and
// audit trail (what `gpuq status -o json` prints).
type JobStatus struct {
	Job      *queue.Job      `json:"job"`
	Attempts []queue.Attempt `json:"attempts"`
	// Spent is what its attempts have cost so far, one amount per currency
	// ("0.0312 EUR"): each attempt's price over its run time, up to its
	// last heartbeat while it runs.
	Spent          []string          `json:"spent,omitempty"`
	LastCheckpoint *queue.Checkpoint `json:"last_checkpoint,omitempty"`
	Placement      json.RawMessage   `json:"placement,omitempty"`
	Pool           string            `json:"pool,omitempty"`
	// Waiting is where a placed job stands in its pool's line.
	Waiting *queue.PoolLine `json:"waiting,omitempty"`
	// After is the jobs its spec's after names, in its order, each with
	// its name and state now; one that is not a job of its project has
	// neither.
	After []queue.Dependency `json:"after,omitempty"`
	// AfterEnded is the same for its spec's after_ended.
	AfterEnded []queue.Dependency `json:"after_ended,omitempty"`
	// Dependents is the jobs that run after it (their spec's after or
	// after_ended names it), in the order they were submitted, each with
	// its name and state now: at most MaxDependents of them.
	Dependents []queue.Dependency `json:"dependents,omitempty"`
	// Notification is how posting the end the job is in to its webhook
	// went (spec.notify): absent until it is tried, and while the job has
	// not ended.
	Notification *queue.Notification `json:"notification,omitempty"`
	LastLogLines []string            `json:"last_log_lines,omitempty"`
	// History is the job's audit trail: every state change, oldest first.
	History []queue.Event `json:"history"`
}

// Status returns a job's status; a placed job carries where it stands in
// its pool's line, a failed or dead job its last 20 lines of output.
func (c *Client) Status(ctx context.Context, id uuid.UUID) (*JobStatus, error) {
	job, err := c.Store.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	st := &JobStatus{Job: job}
	if st.Attempts, err = c.Store.Attempts(ctx, id); err != nil {
		return nil, err
	}
	if st.History, err = c.Store.EventsOf(ctx, id); err != nil {
		return nil, err
	}
	if len(st.Attempts) > 0 {
		spent, err := c.Store.JobSpend(ctx, id)
		if err != nil {
			return nil, err
		}
		st.Spent = amounts(spent)
	}
	cps, err := c.Store.Checkpoints(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(cps) > 0 {
		st.LastCheckpoint = &cps[len(cps)-1]
	}
	if p, err := c.Store.LatestPlacement(ctx, id); err == nil {
		st.Placement, st.Pool = p.Decision, p.Pool
	} else if !errors.Is(err, queue.ErrNotFound) {
		return nil, err
	}
	if job.State == queue.StatePlaced && job.Pool != "" {
		if st.Waiting, err = c.Store.PoolLine(ctx, job); err != nil {
			return nil, err
		}
		if pools := c.Workers.Pools(); pools != nil {
			n := pools[job.Pool]
			st.Waiting.Workers, st.Waiting.Paused = &n.Live, &n.Paused
		}
	}
	if st.After, err = c.dependencies(ctx, job, job.Spec.After); err != nil {
		return nil, err
	}
	if st.AfterEnded, err = c.dependencies(ctx, job, job.Spec.AfterEnded); err != nil {
		return nil, err
	}
	if st.Dependents, err = c.Store.Dependents(ctx, job, MaxDependents); err != nil {
		return nil, err
	}
	if job.Spec.Notify != nil && job.FinalizedAt != nil {
		n, err := c.Store.LatestNotification(ctx, id)
		if err != nil {
			return nil, err
		}
		// One of an end the job has left since (a retry) is not its.
		if n != nil && n.EndedAt.Equal(*job.FinalizedAt) {
			st.Notification = n
		}
	}
	if job.State == queue.StateFailed || job.State == queue.StateDead {
		if st.LastLogLines, err = queue.TailLogs(ctx, c.JS, id, 20); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// dependencies returns the jobs of list (job's spec.after or
// spec.after_ended), in its order; one that is not a job of its project is
// only its id.
func (c *Client) dependencies(ctx context.Context, job *queue.Job, list []string) ([]queue.Dependency, error) {
	if len(list) == 0 {
		return nil, nil
	}
	ids := queue.ParseIDs(list)
	found, err := c.Store.Dependencies(ctx, ids)
	if err != nil {
		return nil, err
	}
	byID := make(map[uuid.UUID]queue.Dependency, len(found))
	for _, d := range found {
		if d.Project == job.Project {
			byID[d.ID] = d
		}
	}
	out := make([]queue.Dependency, len(ids))
	for i, id := range ids {
		out[i] = queue.Dependency{ID: id}
		if d, ok := byID[id]; ok {
			out[i] = d
		}
	}
	return out, nil
}

// MaxDependents bounds the jobs that run after it a job's status lists.
const MaxDependents = 1000

// ValidState reports whether s names a job state.
func ValidState(s queue.JobState) bool {
	return slices.Contains(queue.States, s)
}

// Job returns the job, waiting up to RecordWait for the scheduler to record
// one that was just submitted (its first event announces it).
func (c *Client) Job(ctx context.Context, id uuid.UUID) (*queue.Job, error) {
	job, err := c.Store.Job(ctx, id)
	if !errors.Is(err, queue.ErrNotFound) {
		return job, err
	}
	wait := c.RecordWait
	if wait == 0 {
		wait = 30 * time.Second
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	queue.FollowEvents(wctx, c.JS, id, func(queue.Event) bool { return false }) //nolint:errcheck // the store read below decides
	return c.Store.Job(ctx, id)
}

// Wait follows a job's events until it is terminal, calling progress with
// each, and returns the job as recorded then.
func (c *Client) Wait(ctx context.Context, id uuid.UUID, progress func(queue.Event)) (*queue.Job, error) {
	job, err := c.Job(ctx, id)
	if err != nil || job.State.Terminal() {
		return job, err
	}
	err = queue.FollowEvents(ctx, c.JS, id, func(ev queue.Event) bool {
		if progress != nil {
			progress(ev)
		}
		return !c.ended(ctx, ev)
	})
	if err != nil {
		return nil, err
	}
	return c.Store.Job(ctx, id)
}

// ended reports whether ev is where its job finished: an end no retry
// superseded, as the system of record says now (a retry's events may still
// be on their way to the events stream).
func (c *Client) ended(ctx context.Context, ev queue.Event) bool {
	if !ev.Ends() {
		return false
	}
	job, err := c.Store.Job(ctx, ev.JobID)
	return err != nil || job.State.Terminal()
}

// Logs calls fn with each chunk of a job's stored output; with follow it
// keeps reading new output until the job finishes or ctx ends.
func (c *Client) Logs(ctx context.Context, id uuid.UUID, follow bool, fn func(queue.LogChunk) error) error {
	if _, err := c.Job(ctx, id); err != nil {
		return err
	}
	done := func() bool { return false }
	if follow {
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		finished := make(chan struct{})
		go queue.FollowEvents(fctx, c.JS, id, func(ev queue.Event) bool { //nolint:errcheck // ends with ctx
			if c.ended(fctx, ev) {
				close(finished)
				return false
			}
			return true
		})
		done = func() bool {
			select {
			case <-finished:
				return true
			default:
				return false
			}
		}
	}
	return queue.ReadLogChunks(ctx, c.JS, id, follow, done, fn)
}

// Cancel finalises a job that has not finished and tells any worker running
// it to stop at once.
func (c *Client) Cancel(ctx context.Context, id uuid.UUID) error {
	err := c.Store.Cancel(ctx, id, "cancelled by user")
	var nc *queue.NotClaimableError
	if errors.As(err, &nc) {
		return fmt.Errorf("job %s already finished: %s", id, nc.State)
	}
	if err != nil {
		return err
	}
	return queue.NotifyCancel(c.NATS, id)
}

// ErrRetryUnavailable is what Retry returns on a client with no placer.
var ErrRetryUnavailable = errors.New("this server does not place jobs, so it cannot retry one")

// Retry runs a job that failed, died, was cancelled or was rejected again.
// It is placed afresh, under the policy, offers and budgets in effect now,
// as a job handed back is (a pool that preempted it lately is avoided
// unless no other takes it, and a spot-then-on-demand job preempted again
// and again goes to on-demand), inside the residency it was placed in; its
// counts of errors and preemptions start again from zero, and its next
// attempt resumes from its latest checkpoint; with fresh, its checkpoints
// are dropped and it starts from nothing. It returns the job as placed,
// a *queue.NotRetryableError for a job not finished or succeeded, and a
// *queue.RejectionError when no placement takes it now; then nothing
// changed.
func (c *Client) Retry(ctx context.Context, id uuid.UUID, fresh bool) (*queue.Job, error) {
	if c.Placer == nil || c.Runs == nil {
		return nil, ErrRetryUnavailable
	}
	job, err := c.Store.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	if !job.State.Retryable() {
		return nil, &queue.NotRetryableError{State: job.State}
	}
	if sum, ok := queue.WorkdirDigest(job.Spec.Workdir); ok && c.Workdirs != nil {
		kept, err := c.Workdirs.Has(ctx, job.Project, sum)
		if err != nil {
			return nil, err
		}
		if !kept {
			return nil, &queue.RejectionError{Reason: fmt.Sprintf("its working directory %s is not stored for project %s "+
				"(never uploaded, or deleted storage.workdir_retention after its last upload): upload the same files "+
				"(gpuq workdir upload DIR --project %[2]s, the Python client's upload_workdir, or PUT /v1/workdirs/%[3]s?project=%[2]s) and retry",
				job.Spec.Workdir, job.Project, sum)}
		}
	}
	if names := job.Spec.NamedSecrets(); len(names) > 0 {
		missing, err := c.Store.MissingSecrets(ctx, job.Project, names)
		if err != nil {
			return nil, err
		}
		if len(missing) > 0 {
			return nil, &queue.RejectionError{Reason: queue.SecretRejection(job.Project, missing)}
		}
	}
	note := "retried by user"
	if fresh {
		note += " from the start, its checkpoints dropped"
	}
	note += " (ended " + string(job.State)
	if job.Reason != "" {
		note += ": " + job.Reason
	}
	note += ")"
	before := time.Now()
	if job.Spec.RunsAfter() {
		deps, err := c.Store.Dependencies(ctx, job.Spec.AfterIDs())
		if err != nil {
			return nil, err
		}
		switch r, why := queue.Sequence(job.ID, job.Project, job.Spec, deps); r {
		case queue.Never:
			return nil, &queue.RejectionError{Reason: why}
		case queue.Waiting:
			// Placed, as a new job is, once they have all succeeded.
			if err := c.Store.RetryWaiting(ctx, job, note, why, fresh); err != nil {
				return nil, err
			}
			c.awaitAnnounced(ctx, id, before)
			return c.Store.Job(ctx, id)
		}
	}
	var prior *Prior
	if job.PlacementVersion > 0 {
		current, err := c.Store.LatestPlacement(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("reading the placement of job %s: %w", id, err)
		}
		attempts, err := c.Store.Attempts(ctx, id)
		if err != nil {
			return nil, err
		}
		prior = &Prior{Placement: *current, Attempts: attempts}
	}
	p, err := c.Placer.Place(ctx, job, prior)
	var rej *queue.RejectionError
	if errors.As(err, &rej) && prior != nil && len(prior.Attempts) > 0 {
		// The pools that preempted it lately may be all that take it: a
		// retry a user asks for goes back to them rather than nowhere,
		// still inside the residency it was placed in.
		p, err = c.Placer.Place(ctx, job, &Prior{Placement: prior.Placement})
	}
	if err != nil {
		return nil, err
	}
	if err := c.Store.Retry(ctx, job, p, note, fresh); err != nil {
		return nil, err
	}
	p.Version = job.PlacementVersion + 1
	// The job is placed: a run message that fails to publish now is
	// published by the reconciler, as for any placed job with none in its
	// pool's stream, so the retry stands either way.
	publishOrders(ctx, c.Runs, []queue.RunOrder{orderFor(id, p)}, "") //nolint:errcheck // the reconciler repairs it
	c.awaitAnnounced(ctx, id, before)
	return c.Store.Job(ctx, id)
}

// announceWait bounds how long Retry waits for its events to reach the
// events stream.
const announceWait = 5 * time.Second

// awaitAnnounced returns once the latest event of job in the events stream
// is not an end recorded before since (or after announceWait, as an
// announcement may be lost: the system of record stays the truth). Events
// are announced after their commit without an acknowledgement; a caller
// that follows the job's events once a retry answered then starts from the
// retry, not from the end it retried.
func (c *Client) awaitAnnounced(ctx context.Context, job uuid.UUID, since time.Time) {
	if c.JS == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, announceWait)
	defer cancel()
	queue.FollowEvents(ctx, c.JS, job, func(ev queue.Event) bool { //nolint:errcheck // bounded; the retry stands either way
		return ev.State.Terminal() && ev.At.Before(since)
	})
}

// Result returns where a succeeded job's outputs are stored.
func (c *Client) Result(ctx context.Context, id uuid.UUID) (*queue.ArchiveRecord, error) {
	return c.Store.Result(ctx, id)
}

// amounts writes micros per currency as "0.0312 EUR", one amount per
// currency in the currencies' order.
func amounts(micros map[string]int64) []string {
	var out []string
	for _, cur := range slices.Sorted(maps.Keys(micros)) {
		out = append(out, policy.Money{Micros: micros[cur], Currency: cur}.String())
	}
	return out
}
