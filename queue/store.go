package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	_ "github.com/lib/pq" // the PostgreSQL driver

	"github.com/gpuq/gpuq/sql/db"
)

// EventSink is told about every event after the transaction that recorded it
// commits. The JetStream publisher implements it; nil drops them.
type EventSink interface {
	Announce(ctx context.Context, events []Event)
}

// Store is the PostgreSQL system of record. It wraps the generated queries,
// converts rows into domain types in one place, and guards every worker
// write with the attempt number.
type Store struct {
	DB     *sql.DB
	q      *db.Queries
	Events EventSink
}

// OpenStore connects to PostgreSQL at url and checks the connection.
func OpenStore(ctx context.Context, url string) (*Store, error) {
	conn, err := sql.Open("postgres", url)
	if err != nil {
		return nil, fmt.Errorf("opening PostgreSQL: %w", err)
	}
	conn.SetMaxOpenConns(32)
	conn.SetMaxIdleConns(32)
	if err := conn.PingContext(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	return NewStore(conn), nil
}

// NewStore wraps an open database.
func NewStore(conn *sql.DB) *Store {
	return &Store{DB: conn, q: db.New(conn)}
}

// Close closes the database.
func (s *Store) Close() error { return s.DB.Close() }

func (s *Store) announce(ctx context.Context, events []Event) {
	if s.Events != nil && len(events) > 0 {
		s.Events.Announce(ctx, events)
	}
}

// inTx runs fn in a transaction and announces the events it returns after
// the commit.
func (s *Store) inTx(ctx context.Context, fn func(q *db.Queries) ([]Event, error)) error {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after commit
	events, err := fn(s.q.WithTx(tx))
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.announce(ctx, events)
	return nil
}

func recordEvent(ctx context.Context, q *db.Queries, id uuid.UUID, state JobState, attempt int, msg string, exit *int) (Event, error) {
	err := q.JobEventInsert(ctx, db.JobEventInsertParams{JobID: id, State: db.JobState(state), Attempt: int32(attempt), Message: msg})
	return eventOf(id, state, attempt, msg, exit), err
}

// eventOf is the announcement of an event a statement recorded.
func eventOf(id uuid.UUID, state JobState, attempt int, msg string, exit *int) Event {
	return Event{JobID: id, At: time.Now().UTC(), State: state, Attempt: attempt, Message: msg, ExitCode: exit}
}

// NewJob is a validated submission about to be recorded.
type NewJob struct {
	ID   uuid.UUID
	Spec *Spec
}

// RecordJobs records a batch of submissions in one transaction of three
// statements, whatever the batch size. A submission whose id or idempotency
// key is already recorded inserts nothing; the existing job is returned in
// its place, so redelivery and re-runs are harmless.
func (s *Store) RecordJobs(ctx context.Context, jobs []NewJob) ([]*Job, error) {
	recorded, _, err := s.RecordAndPlace(ctx, jobs, nil)
	return recorded, err
}

// Placing decides, for jobs just recorded, which to place where and which to
// reject with what reason. It runs inside the recording transaction, so a
// batch costs one commit.
type Placing func(ctx context.Context, jobs []*Job) (placed []PlacedJob, rejected map[uuid.UUID]string, err error)

// RecordAndPlace records a batch of submissions like RecordJobs and, in the
// same transaction, the placements and rejections place decides for them.
// It returns the recorded jobs and the placements that took effect.
func (s *Store) RecordAndPlace(ctx context.Context, jobs []NewJob, place Placing) ([]*Job, []PlacedJob, error) {
	params := db.JobInsertManyParams{
		Ids: make([]uuid.UUID, len(jobs)), Projects: make([]string, len(jobs)), Names: make([]string, len(jobs)),
		IdempotencyKeys: make([]string, len(jobs)), Specs: make([]string, len(jobs)),
	}
	var projects []string
	for i, nj := range jobs {
		spec, err := json.Marshal(nj.Spec)
		if err != nil {
			return nil, nil, err
		}
		params.Ids[i], params.Projects[i], params.Names[i] = nj.ID, nj.Spec.Project, nj.Spec.Name
		params.IdempotencyKeys[i], params.Specs[i] = nj.Spec.IdempotencyKey, string(spec)
		if !slices.Contains(projects, nj.Spec.Project) {
			projects = append(projects, nj.Spec.Project)
		}
	}
	// Sorted, so that concurrent schedulers lock project rows in one order.
	slices.Sort(projects)
	out := make([]*Job, len(jobs))
	var done []PlacedJob
	err := s.inTx(ctx, func(q *db.Queries) ([]Event, error) {
		if err := q.ProjectEnsureMany(ctx, projects); err != nil {
			return nil, fmt.Errorf("recording projects %v: %w", projects, err)
		}
		inserted, err := q.JobInsertMany(ctx, params)
		if err != nil {
			return nil, fmt.Errorf("recording %d jobs: %w", len(jobs), err)
		}
		rows, err := q.JobListByIDs(ctx, params.Ids)
		if err != nil {
			return nil, fmt.Errorf("reading %d recorded jobs: %w", len(jobs), err)
		}
		byID := make(map[uuid.UUID]db.Job, len(rows))
		for _, r := range rows {
			byID[r.ID] = r
		}
		for i, nj := range jobs {
			row, ok := byID[nj.ID]
			if !ok && nj.Spec.IdempotencyKey != "" {
				row, err = q.JobGetByIdempotencyKey(ctx, db.JobGetByIdempotencyKeyParams{Project: nj.Spec.Project, IdempotencyKey: sql.NullString{String: nj.Spec.IdempotencyKey, Valid: true}})
				ok = err == nil
			}
			if !ok {
				return nil, fmt.Errorf("finding the job recorded for submission %s: %w", nj.ID, errors.Join(err, ErrNotFound))
			}
			if out[i], err = jobFromRow(row); err != nil {
				return nil, err
			}
		}
		events := make([]Event, len(inserted))
		for i, id := range inserted {
			events[i] = eventOf(id, StatePending, 0, "submitted", nil)
		}
		if place == nil {
			return events, nil
		}
		placed, rejected, err := place(ctx, out)
		if err != nil {
			return nil, err
		}
		for _, j := range out {
			reason, ok := rejected[j.ID]
			if !ok {
				continue
			}
			n, err := q.JobReject(ctx, db.JobRejectParams{ID: j.ID, Reason: reason})
			if err != nil {
				return nil, fmt.Errorf("rejecting job %s: %w", j.ID, err)
			}
			if n == 1 {
				events = append(events, eventOf(j.ID, StateRejected, 0, reason, nil))
			}
		}
		var placedEvents []Event
		done, placedEvents, err = placeMany(ctx, q, placed)
		return append(events, placedEvents...), err
	})
	if err != nil {
		return nil, nil, err
	}
	return out, done, nil
}

// PlacedJob is a placement about to be recorded.
type PlacedJob struct {
	JobID     uuid.UUID
	Placement Placement
}

// RecordPlacements moves each job to its next placement and stores the
// placement with its decision and price, in one statement. A job that is
// running or finished, or was placed again meanwhile, is left alone; the
// returned slice holds the placements that took effect.
func (s *Store) RecordPlacements(ctx context.Context, placed []PlacedJob) ([]PlacedJob, error) {
	done, events, err := placeMany(ctx, s.q, placed)
	if err != nil {
		return nil, err
	}
	s.announce(ctx, events)
	return done, nil
}

func placeMany(ctx context.Context, q *db.Queries, placed []PlacedJob) ([]PlacedJob, []Event, error) {
	if len(placed) == 0 {
		return nil, nil, nil
	}
	n := len(placed)
	params := db.JobPlaceManyParams{
		JobIds: make([]uuid.UUID, n), Versions: make([]int32, n), Pools: make([]string, n), Regions: make([]string, n),
		Residencies: make([]string, n), Countries: make([]string, n), PriceMicros: make([]int64, n),
		Currencies: make([]string, n), Decisions: make([]string, n),
	}
	byID := make(map[uuid.UUID]PlacedJob, n)
	for i, p := range placed {
		decision := p.Placement.Decision
		if len(decision) == 0 {
			decision = []byte("{}")
		}
		for _, c := range p.Placement.Countries {
			if strings.Contains(c, ",") {
				return nil, nil, fmt.Errorf("placement of job %s: country %q must not contain a comma", p.JobID, c)
			}
		}
		params.JobIds[i], params.Versions[i], params.Pools[i] = p.JobID, int32(p.Placement.Version), p.Placement.Pool
		params.Regions[i], params.Residencies[i] = p.Placement.Region, p.Placement.Residency
		params.Countries[i], params.Decisions[i] = strings.Join(p.Placement.Countries, ","), string(decision)
		params.PriceMicros[i], params.Currencies[i] = p.Placement.PriceMicros, p.Placement.Currency
		byID[p.JobID] = p
	}
	ids, err := q.JobPlaceMany(ctx, params)
	if err != nil {
		return nil, nil, fmt.Errorf("recording %d placements: %w", n, err)
	}
	done := make([]PlacedJob, len(ids))
	events := make([]Event, len(ids))
	for i, id := range ids {
		p := byID[id]
		msg := "placed on pool " + p.Placement.Pool
		if p.Placement.Version > 1 {
			msg = fmt.Sprintf("re-placed on pool %s (placement %d)", p.Placement.Pool, p.Placement.Version)
		}
		done[i], events[i] = p, eventOf(id, StatePlaced, 0, msg, nil)
	}
	return done, events, nil
}

// Reject finalises a pending job that cannot be placed, with the reason.
func (s *Store) Reject(ctx context.Context, id uuid.UUID, reason string) error {
	return s.inTx(ctx, func(q *db.Queries) ([]Event, error) {
		n, err := q.JobReject(ctx, db.JobRejectParams{ID: id, Reason: reason})
		if err != nil || n == 0 {
			return nil, err
		}
		ev, err := recordEvent(ctx, q, id, StateRejected, 0, reason, nil)
		return []Event{ev}, err
	})
}

// ClaimRequest identifies the worker claiming a job.
type ClaimRequest struct {
	JobID            uuid.UUID
	PlacementVersion int
	Lease            time.Duration
	WorkerID         string
	Host             string
	PID              int
	Pool             string
	// NodeID is the machine the worker runs on, CanaryRunID the canary it
	// passed last (0 when the worker runs no canary).
	NodeID      string
	CanaryRunID int64
}

// Claimed is a successful claim: the job under its new attempt and the
// checkpoint to resume from, if any.
type Claimed struct {
	Job        *Job
	Checkpoint *Checkpoint
}

// NotClaimableError says why a job could not be claimed.
type NotClaimableError struct {
	State JobState
	// LeaseLeft is how long another attempt's lease still runs.
	LeaseLeft time.Duration
	// Stale is true when the message belongs to an older placement.
	Stale bool
}

func (e *NotClaimableError) Error() string {
	switch {
	case e.Stale:
		return "the job was re-placed; this message is stale"
	case e.LeaseLeft > 0:
		return fmt.Sprintf("the job is running under another attempt (lease %s left)", e.LeaseLeft.Round(time.Millisecond))
	}
	return fmt.Sprintf("the job is %s", e.State)
}

// Claim starts a new attempt of a job and closes any attempt it supersedes,
// in one statement, and returns the latest checkpoint.
func (s *Store) Claim(ctx context.Context, r ClaimRequest) (*Claimed, error) {
	res, err := s.ClaimMany(ctx, []ClaimRequest{r})
	if err != nil {
		return nil, err
	}
	return res[0].Claimed, res[0].Err
}

// ClaimResult is the outcome of one request of ClaimMany: the claimed job, or
// why it could not be claimed (*NotClaimableError, ErrNotFound).
type ClaimResult struct {
	Claimed *Claimed
	Err     error
}

// ClaimMany claims a batch of jobs for one worker: every request must name
// the same worker, host, pid, pool and lease. Distinct jobs are claimed in
// one statement; a job named twice is claimed (and, the second time, found
// running) in a statement of its own. The error is for the batch as a whole;
// each request's own outcome is in its result.
func (s *Store) ClaimMany(ctx context.Context, reqs []ClaimRequest) ([]ClaimResult, error) {
	results := make([]ClaimResult, len(reqs))
	pending := make([]int, len(reqs))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		var round, later []int
		seen := make(map[uuid.UUID]bool, len(pending))
		for _, i := range pending {
			if seen[reqs[i].JobID] {
				later = append(later, i)
				continue
			}
			seen[reqs[i].JobID] = true
			round = append(round, i)
		}
		if err := s.claimRound(ctx, reqs, round, results); err != nil {
			return nil, err
		}
		pending = later
	}
	return results, nil
}

func (s *Store) claimRound(ctx context.Context, reqs []ClaimRequest, round []int, results []ClaimResult) error {
	first := reqs[round[0]]
	msg := fmt.Sprintf("running on %s (pid %d, pool %s)", first.Host, first.PID, first.Pool)
	params := db.JobClaimManyParams{
		LeaseSeconds: first.Lease.Seconds(), WorkerID: first.WorkerID, Host: first.Host, Pid: int32(first.PID), Pool: first.Pool, Message: msg,
		NodeID: first.NodeID, CanaryRunID: sql.NullInt64{Int64: first.CanaryRunID, Valid: first.CanaryRunID != 0},
	}
	for _, i := range round {
		r := reqs[i]
		if r.WorkerID != first.WorkerID || r.Host != first.Host || r.PID != first.PID || r.Pool != first.Pool || r.Lease != first.Lease {
			return fmt.Errorf("claiming job %s: a batch of claims must come from one worker", r.JobID)
		}
		params.Ids = append(params.Ids, r.JobID)
		params.PlacementVersions = append(params.PlacementVersions, int32(r.PlacementVersion))
	}
	rows, err := s.q.JobClaimMany(ctx, params)
	if err != nil {
		return fmt.Errorf("claiming %d jobs: %w", len(round), err)
	}
	claimed := make(map[uuid.UUID]db.Job, len(rows))
	for _, row := range rows {
		claimed[row.ID] = row
	}
	var events []Event
	for _, i := range round {
		r := reqs[i]
		row, ok := claimed[r.JobID]
		if !ok {
			results[i].Err = s.whyNotClaimed(ctx, r)
			continue
		}
		c, err := s.claimedFromRow(ctx, row)
		if err != nil {
			return err
		}
		results[i].Claimed = c
		events = append(events, eventOf(r.JobID, StateRunning, int(row.Attempt), msg, nil))
	}
	s.announce(ctx, events)
	return nil
}

// whyNotClaimed explains a claim that claimed nothing.
func (s *Store) whyNotClaimed(ctx context.Context, r ClaimRequest) error {
	info, err := s.q.JobLeaseRemaining(ctx, r.JobID)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("claiming job %s: %w", r.JobID, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("claiming job %s: %w", r.JobID, err)
	}
	nc := &NotClaimableError{State: JobState(info.State), Stale: int(info.PlacementVersion) != r.PlacementVersion}
	if nc.State == StateRunning && !nc.Stale {
		// A stale message can never be claimed (placement versions only
		// grow), so only a current one waits for the lease. This statement
		// runs after the claim's: a lease that ran out in
		// between still refused the claim, and the job is still to be run,
		// so the caller must look again, not drop the message.
		nc.LeaseLeft = max(time.Duration(info.LeaseSeconds*float64(time.Second)), time.Millisecond)
	}
	return nc
}

// claimedFromRow converts a claimed row and reads the checkpoint to resume
// from. Once claimed, only this attempt can record checkpoints, so the
// latest one read now is the right one.
func (s *Store) claimedFromRow(ctx context.Context, row db.Job) (*Claimed, error) {
	job, err := jobFromRow(row)
	if err != nil {
		return nil, err
	}
	out := &Claimed{Job: job}
	if row.CheckpointSeq > 0 {
		cp, err := s.q.CheckpointLatest(ctx, row.ID)
		if err != nil {
			return nil, fmt.Errorf("reading the latest checkpoint of job %s: %w", row.ID, err)
		}
		c := checkpointFromRow(cp)
		out.Checkpoint = &c
	}
	return out, nil
}

// Heartbeat extends the attempt's lease. ErrFenced means the attempt lost the
// job (superseded, cancelled or finished elsewhere).
func (s *Store) Heartbeat(ctx context.Context, id uuid.UUID, attempt int, lease time.Duration) error {
	n, err := s.q.JobHeartbeat(ctx, db.JobHeartbeatParams{ID: id, Attempt: int32(attempt), LeaseSeconds: lease.Seconds()})
	if err != nil {
		return fmt.Errorf("heartbeat of job %s attempt %d: %w", id, attempt, err)
	}
	if n == 0 {
		return ErrFenced
	}
	return nil
}

// RecordNotice records, under attempt, a provider's warning about the
// worker's machine (a preemption notice, or an early warning such as a
// rebalance recommendation) as an event on the job's trail, at once, so that
// the replacer and the autoscaler can act before the machine is gone. It
// refreshes the lease like a heartbeat; the attempt's outcome is recorded
// when the job is handed back.
func (s *Store) RecordNotice(ctx context.Context, id uuid.UUID, attempt int, message string, lease time.Duration) error {
	return s.inTx(ctx, func(q *db.Queries) ([]Event, error) {
		n, err := q.JobHeartbeat(ctx, db.JobHeartbeatParams{ID: id, Attempt: int32(attempt), LeaseSeconds: lease.Seconds()})
		if err != nil {
			return nil, fmt.Errorf("recording a notice of job %s attempt %d: %w", id, attempt, err)
		}
		if n == 0 {
			return nil, ErrFenced
		}
		ev, err := recordEvent(ctx, q, id, StateRunning, attempt, message, nil)
		return []Event{ev}, err
	})
}

// ArchiveRecord describes a packed archive in a checkpoint store.
type ArchiveRecord struct {
	Bytes    int64
	SHA256   string
	Region   string
	StoreURI string
}

// RecordCheckpoint records a committed checkpoint under attempt and returns
// its sequence number; ErrFenced when the attempt no longer owns the job.
func (s *Store) RecordCheckpoint(ctx context.Context, id uuid.UUID, attempt int, a ArchiveRecord) (int, error) {
	seq, err := s.q.CheckpointInsert(ctx, db.CheckpointInsertParams{JobID: id, Attempt: int32(attempt), Bytes: a.Bytes, Sha256: a.SHA256, Region: a.Region, StoreUri: a.StoreURI})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrFenced
	}
	if err != nil {
		return 0, fmt.Errorf("recording checkpoint of job %s: %w", id, err)
	}
	return int(seq), nil
}

// AttemptRef names one attempt of one job.
type AttemptRef struct {
	JobID   uuid.UUID
	Attempt int
}

// Succeed records the job's outputs and its success under attempt.
func (s *Store) Succeed(ctx context.Context, id uuid.UUID, attempt int, outputs *ArchiveRecord) error {
	if outputs == nil {
		recorded, err := s.SucceedMany(ctx, []AttemptRef{{JobID: id, Attempt: attempt}})
		if err == nil && !recorded[0] {
			err = ErrFenced
		}
		return err
	}
	return s.inTx(ctx, func(q *db.Queries) ([]Event, error) {
		n, err := q.ResultInsert(ctx, db.ResultInsertParams{JobID: id, Attempt: int32(attempt), Bytes: outputs.Bytes, Sha256: outputs.SHA256, Region: outputs.Region, StoreUri: outputs.StoreURI})
		if err != nil {
			return nil, fmt.Errorf("recording outputs of job %s: %w", id, err)
		}
		if n == 0 {
			return nil, ErrFenced
		}
		recorded, events, err := succeedMany(ctx, q, []AttemptRef{{JobID: id, Attempt: attempt}})
		if err == nil && !recorded[0] {
			err = ErrFenced
		}
		return events, err
	})
}

// SucceedMany records the success of a batch of attempts that left no
// outputs, in one statement. recorded[i] is false when refs[i] no longer
// owns its job (fenced out); such an attempt must not acknowledge.
func (s *Store) SucceedMany(ctx context.Context, refs []AttemptRef) (recorded []bool, err error) {
	recorded, events, err := succeedMany(ctx, s.q, refs)
	if err != nil {
		return nil, err
	}
	s.announce(ctx, events)
	return recorded, nil
}

func succeedMany(ctx context.Context, q *db.Queries, refs []AttemptRef) ([]bool, []Event, error) {
	params := db.JobSucceedManyParams{Ids: make([]uuid.UUID, len(refs)), Attempts: make([]int32, len(refs))}
	for i, r := range refs {
		params.Ids[i], params.Attempts[i] = r.JobID, int32(r.Attempt)
	}
	ids, err := q.JobSucceedMany(ctx, params)
	if err != nil {
		return nil, nil, fmt.Errorf("recording the success of %d jobs: %w", len(refs), err)
	}
	done := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		done[id] = true
	}
	recorded := make([]bool, len(refs))
	var events []Event
	zero := 0
	for i, r := range refs {
		if recorded[i] = done[r.JobID]; recorded[i] {
			events = append(events, eventOf(r.JobID, StateSucceeded, r.Attempt, "succeeded", &zero))
		}
	}
	return recorded, events, nil
}

func endAttempt(ctx context.Context, q *db.Queries, id uuid.UUID, attempt int, outcome string, exit *int, state JobState, msg string) ([]Event, error) {
	if err := q.AttemptEnd(ctx, db.AttemptEndParams{JobID: id, Attempt: int32(attempt), Outcome: outcome, ExitCode: nullInt(exit)}); err != nil {
		return nil, err
	}
	ev, err := recordEvent(ctx, q, id, state, attempt, msg, exit)
	ev.Outcome = outcome
	return []Event{ev}, err
}

// Fail finalises the job as failed under attempt.
func (s *Store) Fail(ctx context.Context, id uuid.UUID, attempt int, outcome string, exit *int, reason string) error {
	return s.inTx(ctx, func(q *db.Queries) ([]Event, error) {
		n, err := q.JobFail(ctx, db.JobFailParams{ID: id, Attempt: int32(attempt), ExitCode: nullInt(exit), Reason: reason})
		if err != nil {
			return nil, fmt.Errorf("recording failure of job %s: %w", id, err)
		}
		if n == 0 {
			return nil, ErrFenced
		}
		return endAttempt(ctx, q, id, attempt, outcome, exit, StateFailed, reason)
	})
}

// Requeue hands a running job back to its pool after an error (errors+1) or a
// preemption (preemptions+1), under attempt.
func (s *Store) Requeue(ctx context.Context, id uuid.UUID, attempt int, outcome string, exit *int, reason string) error {
	addErr, addPre := 0, 0
	if outcome == OutcomePreempted {
		addPre = 1
	} else {
		addErr = 1
	}
	return s.inTx(ctx, func(q *db.Queries) ([]Event, error) {
		n, err := q.JobRequeue(ctx, db.JobRequeueParams{ID: id, Attempt: int32(attempt), AddErrors: int32(addErr), AddPreemptions: int32(addPre), ExitCode: nullInt(exit), Reason: reason})
		if err != nil {
			return nil, fmt.Errorf("requeueing job %s: %w", id, err)
		}
		if n == 0 {
			return nil, ErrFenced
		}
		return endAttempt(ctx, q, id, attempt, outcome, exit, StatePlaced, reason)
	})
}

// EndAttempt closes an attempt without touching the job: the worker was
// fenced out or the job was cancelled under it.
func (s *Store) EndAttempt(ctx context.Context, id uuid.UUID, attempt int, outcome string, exit *int) error {
	return s.q.AttemptEnd(ctx, db.AttemptEndParams{JobID: id, Attempt: int32(attempt), Outcome: outcome, ExitCode: nullInt(exit)})
}

// Cancel finalises a job that has not finished. It returns ErrNotFound for an
// unknown job and a *NotClaimableError carrying the state of a finished one.
func (s *Store) Cancel(ctx context.Context, id uuid.UUID, reason string) error {
	return s.inTx(ctx, func(q *db.Queries) ([]Event, error) {
		attempt, err := q.JobCancel(ctx, db.JobCancelParams{ID: id, Reason: reason})
		if errors.Is(err, sql.ErrNoRows) {
			row, err := q.JobGetByID(ctx, id)
			if errors.Is(err, sql.ErrNoRows) {
				return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
			}
			if err != nil {
				return nil, err
			}
			return nil, &NotClaimableError{State: JobState(row.State)}
		}
		if err != nil {
			return nil, fmt.Errorf("cancelling job %s: %w", id, err)
		}
		ev, err := recordEvent(ctx, q, id, StateCancelled, int(attempt), reason, nil)
		return []Event{ev}, err
	})
}

// MarkDead finalises a job that can no longer make progress.
func (s *Store) MarkDead(ctx context.Context, id uuid.UUID, attempt int, reason string) error {
	return s.inTx(ctx, func(q *db.Queries) ([]Event, error) {
		n, err := q.JobMarkDead(ctx, db.JobMarkDeadParams{ID: id, Reason: reason})
		if err != nil || n == 0 {
			return nil, err
		}
		if err := q.AttemptEnd(ctx, db.AttemptEndParams{JobID: id, Attempt: int32(attempt), Outcome: OutcomePreempted}); err != nil {
			return nil, err
		}
		ev, err := recordEvent(ctx, q, id, StateDead, attempt, reason, nil)
		return []Event{ev}, err
	})
}

// Job returns one job.
func (s *Store) Job(ctx context.Context, id uuid.UUID) (*Job, error) {
	row, err := s.q.JobGetByID(ctx, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading job %s: %w", id, err)
	}
	return jobFromRow(row)
}

// ListFilter narrows List; zero values match everything.
type ListFilter struct {
	State   JobState
	Project string
	Limit   int
}

// List returns jobs, newest first.
func (s *Store) List(ctx context.Context, f ListFilter) ([]*Job, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	rows, err := s.q.JobList(ctx, db.JobListParams{
		State:   db.NullJobState{JobState: db.JobState(f.State), Valid: f.State != ""},
		Project: sql.NullString{String: f.Project, Valid: f.Project != ""},
		MaxRows: int32(f.Limit),
	})
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	out := make([]*Job, 0, len(rows))
	for _, r := range rows {
		j, err := jobFromRow(r)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// Attempts returns a job's attempts, oldest first.
func (s *Store) Attempts(ctx context.Context, id uuid.UUID) ([]Attempt, error) {
	rows, err := s.q.AttemptListByJob(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("reading attempts of job %s: %w", id, err)
	}
	out := make([]Attempt, len(rows))
	for i, r := range rows {
		out[i] = Attempt{Attempt: int(r.Attempt), WorkerID: r.WorkerID, Host: r.Host, PID: int(r.Pid), Pool: r.Pool,
			StartedAt: r.StartedAt, HeartbeatAt: r.HeartbeatAt, EndedAt: timePtr(r.EndedAt), Outcome: r.Outcome, ExitCode: intPtr(r.ExitCode),
			NodeID: r.NodeID, CanaryRunID: r.CanaryRunID.Int64}
	}
	return out, nil
}

// Checkpoints returns a job's checkpoints in sequence order.
func (s *Store) Checkpoints(ctx context.Context, id uuid.UUID) ([]Checkpoint, error) {
	rows, err := s.q.CheckpointListByJob(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("reading checkpoints of job %s: %w", id, err)
	}
	out := make([]Checkpoint, len(rows))
	for i, r := range rows {
		out[i] = checkpointFromRow(r)
	}
	return out, nil
}

// EventsOf returns a job's audit trail, oldest first.
func (s *Store) EventsOf(ctx context.Context, id uuid.UUID) ([]Event, error) {
	rows, err := s.q.JobEventListByJob(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("reading events of job %s: %w", id, err)
	}
	out := make([]Event, len(rows))
	for i, r := range rows {
		out[i] = Event{JobID: r.JobID, At: r.At, State: JobState(r.State), Attempt: int(r.Attempt), Message: r.Message}
	}
	return out, nil
}

// LatestPlacement returns the job's current placement with its decision.
func (s *Store) LatestPlacement(ctx context.Context, id uuid.UUID) (*Placement, error) {
	r, err := s.q.PlacementLatest(ctx, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("placement of job %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return &Placement{Version: int(r.Version), Pool: r.Pool, Region: r.Region, Residency: r.Residency, Countries: r.Countries,
		PriceMicros: r.PriceMicros, Currency: r.Currency, Decision: r.Decision}, nil
}

// Result returns where the job's outputs were stored.
func (s *Store) Result(ctx context.Context, id uuid.UUID) (*ArchiveRecord, error) {
	r, err := s.q.ResultGet(ctx, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("outputs of job %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return &ArchiveRecord{Bytes: r.Bytes, SHA256: r.Sha256, Region: r.Region, StoreURI: r.StoreUri}, nil
}

// Unsettled is a job the reconciler must look at.
type Unsettled struct {
	ID               uuid.UUID
	State            JobState
	Pool             string
	PlacementVersion int
}

// ListUnsettled returns pending jobs older than pendingAge and placed or
// lease-expired running jobs quiet for longer than placedAge.
func (s *Store) ListUnsettled(ctx context.Context, pendingAge, placedAge time.Duration, limit int) ([]Unsettled, error) {
	rows, err := s.q.JobListUnsettled(ctx, db.JobListUnsettledParams{PendingSeconds: pendingAge.Seconds(), PlacedSeconds: placedAge.Seconds(), MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("listing unsettled jobs: %w", err)
	}
	out := make([]Unsettled, len(rows))
	for i, r := range rows {
		out[i] = Unsettled{ID: r.ID, State: JobState(r.State), Pool: r.Pool.String, PlacementVersion: int(r.PlacementVersion)}
	}
	return out, nil
}

// Spend returns what a project's attempts started since a time have cost so
// far, in micros per currency. Running attempts count up to their last
// heartbeat, so spend is known as it accrues.
func (s *Store) Spend(ctx context.Context, project string, since time.Time) (map[string]int64, error) {
	rows, err := s.q.AttemptSpendByProject(ctx, db.AttemptSpendByProjectParams{Project: project, Since: since})
	if err != nil {
		return nil, fmt.Errorf("summing the spend of project %s: %w", project, err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Currency] = r.Micros
	}
	return out, nil
}

func jobFromRow(r db.Job) (*Job, error) {
	var spec Spec
	if err := json.Unmarshal(r.Spec, &spec); err != nil {
		return nil, fmt.Errorf("decoding spec of job %s: %w", r.ID, err)
	}
	return &Job{
		ID: r.ID, Project: r.Project, Name: r.Name, IdempotencyKey: r.IdempotencyKey.String, Spec: &spec,
		State: JobState(r.State), Attempt: int(r.Attempt), Errors: int(r.Errors), Preemptions: int(r.Preemptions),
		PlacementVersion: int(r.PlacementVersion), Pool: r.Pool.String, ExitCode: intPtr(r.ExitCode), Reason: r.Reason,
		LeaseExpiresAt: timePtr(r.LeaseExpiresAt), SubmittedAt: r.SubmittedAt, UpdatedAt: r.UpdatedAt, FinalizedAt: timePtr(r.FinalizedAt),
	}, nil
}

func checkpointFromRow(r db.Checkpoint) Checkpoint {
	return Checkpoint{JobID: r.JobID, Seq: int(r.Seq), Attempt: int(r.Attempt), Bytes: r.Bytes, SHA256: r.Sha256, Region: r.Region, StoreURI: r.StoreUri, CreatedAt: r.CreatedAt}
}

func nullInt(p *int) sql.NullInt32 {
	if p == nil {
		return sql.NullInt32{}
	}
	return sql.NullInt32{Int32: int32(*p), Valid: true}
}

func intPtr(n sql.NullInt32) *int {
	if !n.Valid {
		return nil
	}
	v := int(n.Int32)
	return &v
}

func timePtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	v := t.Time
	return &v
}
