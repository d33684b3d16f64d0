package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/db"
)

// EventSink is told about every event after the transaction that recorded it
// commits. The JetStream publisher implements it; nil drops them.
type EventSink interface {
	Announce(ctx context.Context, events []queue.Event)
}

// InstanceEventSink is told after a statement that recorded instance events
// commits; the announcer then publishes them on JetStream. nil leaves them
// to the announcer's next pass.
type InstanceEventSink interface {
	InstanceEventsRecorded()
}

// Store is the PostgreSQL system of record. It wraps the generated queries,
// converts rows into domain types in one place, and guards every worker
// write with the attempt number.
type Store struct {
	DB *sql.DB
	q  *db.Queries
	// hot runs the job path's claims, successes and heartbeats; see
	// openHot.
	hot    *db.Queries
	hotDB  *sql.DB
	Events EventSink
	// InstanceSink is told when instance events committed.
	InstanceSink InstanceEventSink
	// HistoryRetention bounds the recorded availability of pools; the
	// zero value is PoolHistoryRetention's defaults.
	HistoryRetention PoolHistoryRetention
	// SnapshotRetention is how long offer snapshots are kept for replaying
	// placements; zero is DefaultSnapshotRetention.
	SnapshotRetention time.Duration
	// Storage bounds the checkpoints kept per job and the bytes a project
	// stores; the zero value is queue.Storage's defaults.
	Storage queue.Storage
	// Sealer, when set, seals the values of secrets set from now on, and
	// opens those it sealed; without it values are stored as they are,
	// and a sealed one cannot be read.
	Sealer *SecretSealer

	historyMu   sync.Mutex
	compactedAt time.Time
	snaps       snapshots
	// projects holds the names of projects this store has seen recorded
	// (projects are never deleted), so that a batch of submissions for
	// known projects skips recording them again.
	projects sync.Map
}

// Open connects to PostgreSQL at url and checks the connection.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("opening PostgreSQL: %w", err)
	}
	// Each statement goes in one round trip, planned for its own
	// arguments (an unnamed statement whose description pgx caches);
	// lib/pq took two. The job path's claim, success and heartbeat
	// statements run on connections of their own (openHot).
	cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	conn := stdlib.OpenDB(*cfg)
	conn.SetMaxOpenConns(32)
	conn.SetMaxIdleConns(32)
	if err := conn.PingContext(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	st := New(conn)
	if st.hotDB, err = openHot(ctx, *cfg); err != nil {
		conn.Close()
		return nil, err
	}
	st.hot = db.New(pgxArgs{st.hotDB})
	return st, nil
}

// openHot opens the few connections that run the job path's claim,
// success and heartbeat statements, as statements prepared once per
// connection with generic plans: each then runs without being parsed,
// analysed or planned again. Planning a claim statement took about 0.4 ms,
// a third of PostgreSQL's CPU per statement when claims and completions
// come a few jobs at a time. A generic plan is made once and kept until
// the schema or the tables' statistics change, and PostgreSQL makes it for
// the tables as they are then: on a young database, nearly empty, it would
// scan whole tables (attempts, placements) and keep doing so as they grow.
// So these connections plan with sequential scans, hash joins and merge
// joins off, and each plan is the index lookups by job id that the
// statements are written for, whatever the tables hold. No other statement
// runs on them.
func openHot(ctx context.Context, cfg pgx.ConnConfig) (*sql.DB, error) {
	cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	cfg.RuntimeParams = maps.Clone(cfg.RuntimeParams)
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	for k, v := range map[string]string{"plan_cache_mode": "force_generic_plan", "enable_seqscan": "off",
		"enable_hashjoin": "off", "enable_mergejoin": "off"} {
		cfg.RuntimeParams[k] = v
	}
	conn := stdlib.OpenDB(cfg)
	conn.SetMaxOpenConns(hotConns)
	conn.SetMaxIdleConns(hotConns)
	if err := conn.PingContext(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	return conn, nil
}

// hotConns bounds the connections of the job path's statements: the worker
// service runs one claim and one completion statement at a time, and
// heartbeats as they come.
const hotConns = 4

// New wraps a database opened with pgx's database/sql driver
// (github.com/jackc/pgx/v5/stdlib), as Open opens it. Its claims,
// successes and heartbeats run on conn like every other statement, each
// planned for its call.
func New(conn *sql.DB) *Store {
	q := db.New(pgxArgs{conn})
	return &Store{DB: conn, q: q, hot: q}
}

// Close closes the database.
func (s *Store) Close() error {
	if s.hotDB != nil {
		s.hotDB.Close()
	}
	return s.DB.Close()
}

func (s *Store) announce(ctx context.Context, events []queue.Event) {
	if s.Events != nil && len(events) > 0 {
		s.Events.Announce(ctx, events)
	}
}

// inTx runs fn in a transaction and announces the events it returns after
// the commit.
func (s *Store) inTx(ctx context.Context, fn func(q *db.Queries) ([]queue.Event, error)) error {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after commit
	events, err := fn(db.New(pgxArgs{tx}))
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.announce(ctx, events)
	return nil
}

func recordEvent(ctx context.Context, q *db.Queries, id uuid.UUID, state queue.JobState, attempt int, msg string, exit *int) (queue.Event, error) {
	err := q.JobEventInsert(ctx, db.JobEventInsertParams{JobID: id, State: db.JobState(state), Attempt: int32(attempt), Message: msg})
	return eventOf(id, state, attempt, msg, exit), err
}

// eventOf is the announcement of an event a statement recorded.
func eventOf(id uuid.UUID, state queue.JobState, attempt int, msg string, exit *int) queue.Event {
	return queue.Event{JobID: id, At: time.Now().UTC(), State: state, Attempt: attempt, Message: msg, ExitCode: exit}
}

// Claim starts a new attempt of a job and closes any attempt it supersedes,
// in one statement, and returns the latest checkpoint.
func (s *Store) Claim(ctx context.Context, r queue.ClaimRequest) (*queue.Claimed, error) {
	res, err := s.ClaimMany(ctx, []queue.ClaimRequest{r})
	if err != nil {
		return nil, err
	}
	return res[0].Claimed, res[0].Err
}

// ClaimMany claims a batch of jobs, each for the worker its request names: a
// batch may hold the claims of several workers and pools. Distinct jobs are
// claimed in one statement; a job named twice is claimed (and, the second
// time, found running) in a statement of its own. The error is for the batch
// as a whole; each request's own outcome is in its result.
func (s *Store) ClaimMany(ctx context.Context, reqs []queue.ClaimRequest) ([]queue.ClaimResult, error) {
	results := make([]queue.ClaimResult, len(reqs))
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

func (s *Store) claimRound(ctx context.Context, reqs []queue.ClaimRequest, round []int, results []queue.ClaimResult) error {
	var params db.JobClaimManyParams
	// Each distinct claimant is sent once; each claim names its claimant by
	// its position in the claimant arrays (from 1).
	claimants := make(map[claimant]int32, 1)
	for _, i := range round {
		r := reqs[i]
		c := claimantOf(r)
		k, ok := claimants[c]
		if !ok {
			params.WorkerIds = append(params.WorkerIds, r.WorkerID)
			params.Hosts = append(params.Hosts, r.Host)
			params.Pids = append(params.Pids, int32(r.PID))
			params.Pools = append(params.Pools, r.Pool)
			params.NodeIds = append(params.NodeIds, r.NodeID)
			params.CanaryRunIds = append(params.CanaryRunIds, r.CanaryRunID)
			params.Countries = append(params.Countries, r.Country)
			params.LeaseSeconds = append(params.LeaseSeconds, r.Lease.Seconds())
			params.Messages = append(params.Messages, fmt.Sprintf("running on %s (pid %d, pool %s)", r.Host, r.PID, r.Pool))
			k = int32(len(params.WorkerIds))
			claimants[c] = k
		}
		params.Ids = append(params.Ids, r.JobID)
		params.PlacementVersions = append(params.PlacementVersions, int32(r.PlacementVersion))
		params.ClaimIds = append(params.ClaimIds, r.ClaimID)
		params.Claimants = append(params.Claimants, k)
	}
	rows, err := s.hot.JobClaimMany(ctx, params)
	if err != nil {
		return fmt.Errorf("claiming %d jobs: %w", len(round), err)
	}
	claimed := make(map[uuid.UUID]db.JobRow, len(rows))
	for _, row := range rows {
		claimed[row.ID] = row
	}
	var events []queue.Event
	for k, i := range round {
		r := reqs[i]
		row, ok := claimed[r.JobID]
		if !ok {
			results[i].Claimed, results[i].Err = s.unclaimed(ctx, r)
			continue
		}
		c, err := s.claimedFromRow(ctx, row)
		if err != nil {
			return err
		}
		results[i].Claimed = c
		events = append(events, eventOf(r.JobID, queue.StateRunning, int(row.Attempt), params.Messages[params.Claimants[k]-1], nil))
	}
	s.announce(ctx, events)
	return nil
}

// claimant is what a claim says of the worker that makes it.
type claimant struct {
	worker, host, pool, node, country string
	pid                               int
	canaryRun                         int64
	lease                             time.Duration
}

func claimantOf(r queue.ClaimRequest) claimant {
	return claimant{worker: r.WorkerID, host: r.Host, pool: r.Pool, node: r.NodeID, country: r.Country,
		pid: r.PID, canaryRun: r.CanaryRunID, lease: r.Lease}
}

// unclaimed explains a claim that claimed nothing, or returns the attempt a
// repeated claim request started.
func (s *Store) unclaimed(ctx context.Context, r queue.ClaimRequest) (*queue.Claimed, error) {
	info, err := s.q.JobLeaseRemaining(ctx, r.JobID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("claiming job %s: %w", r.JobID, queue.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("claiming job %s: %w", r.JobID, err)
	}
	nc := &queue.NotClaimableError{State: queue.JobState(info.State), Stale: int(info.PlacementVersion) != r.PlacementVersion}
	if nc.Stale {
		return nil, nc
	}
	if r.ClaimID != uuid.Nil && nc.State == queue.StateRunning {
		row, err := s.q.JobGetByClaim(ctx, db.JobGetByClaimParams{ID: r.JobID, ClaimID: uuid.NullUUID{UUID: r.ClaimID, Valid: true}})
		if err == nil {
			return s.claimedFromRow(ctx, row)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("claiming job %s: %w", r.JobID, err)
		}
	}
	if len(info.Countries) > 0 && !slices.Contains(info.Countries, r.Country) && !nc.State.Terminal() {
		where := r.Country
		if where == "" {
			where = "unknown"
		}
		return nil, &queue.ClaimRefusedError{Reason: fmt.Sprintf("pool %s (country %s) lies outside residency %s", r.Pool, where, info.Residency)}
	}
	if nc.State == queue.StateRunning {
		// A stale message can never be claimed (placement versions only
		// grow), so only a current one waits for the lease. This statement
		// runs after the claim's: a lease that ran out in
		// between still refused the claim, and the job is still to be run,
		// so the caller must look again, not drop the message.
		nc.LeaseLeft = max(time.Duration(info.LeaseSeconds*float64(time.Second)), time.Millisecond)
	}
	return nil, nc
}

// RefuseClaim records that a claim of the job under placementVersion was
// refused (the claiming pool lies outside its residency): it counts the
// refusal and puts the reason on the job's trail. It reports false, changing
// nothing, when the job no longer waits under that placement; otherwise the
// caller re-places the job.
func (s *Store) RefuseClaim(ctx context.Context, id uuid.UUID, placementVersion int, reason string) (bool, error) {
	var refused bool
	err := s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
		n, err := q.JobRefuseClaim(ctx, db.JobRefuseClaimParams{ID: id, PlacementVersion: int32(placementVersion)})
		if err != nil || n == 0 {
			return nil, err
		}
		refused = true
		ev, err := recordEvent(ctx, q, id, queue.StatePlaced, 0, "claim refused: "+reason+"; handed back for re-placement", nil)
		return []queue.Event{ev}, err
	})
	if err != nil {
		return false, fmt.Errorf("recording a refused claim of job %s: %w", id, err)
	}
	return refused, nil
}

// claimedFromRow converts a claimed row and reads the checkpoint to resume
// from. Once claimed, only this attempt can record checkpoints, so the
// latest one read now is the right one.
func (s *Store) claimedFromRow(ctx context.Context, row db.JobRow) (*queue.Claimed, error) {
	out := &queue.Claimed{Job: jobWithoutSpec(row), SpecJSON: row.Spec}
	if row.CheckpointSeq > 0 {
		cp, err := s.q.CheckpointLatest(ctx, row.ID)
		if errors.Is(err, sql.ErrNoRows) {
			return out, nil // a retry dropped them, or they outlived their retention
		}
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
	n, err := s.hot.JobHeartbeat(ctx, db.JobHeartbeatParams{ID: id, Attempt: int32(attempt), LeaseSeconds: lease.Seconds()})
	if err != nil {
		return fmt.Errorf("heartbeat of job %s attempt %d: %w", id, attempt, err)
	}
	if n == 0 {
		return queue.ErrFenced
	}
	return nil
}

// RecordNotice records, under attempt, a provider's warning about the
// worker's machine (a preemption notice, or an early warning such as a
// rebalance recommendation) as an event on the job's trail, at once, so that
// the replacer and the autoscaler can act before the machine is gone. It
// refreshes the lease like a heartbeat; the attempt's outcome is recorded
// when the job is handed back. ErrFenced when the attempt no longer owns the
// job.
func (s *Store) RecordNotice(ctx context.Context, id uuid.UUID, attempt int, message string, lease time.Duration) error {
	return s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
		n, err := q.JobHeartbeat(ctx, db.JobHeartbeatParams{ID: id, Attempt: int32(attempt), LeaseSeconds: lease.Seconds()})
		if err != nil {
			return nil, fmt.Errorf("recording a notice of job %s attempt %d: %w", id, attempt, err)
		}
		if n == 0 {
			return nil, queue.ErrFenced
		}
		ev, err := recordEvent(ctx, q, id, queue.StateRunning, attempt, message, nil)
		return []queue.Event{ev}, err
	})
}

// RecordCheckpoint records a committed checkpoint under attempt and returns
// its sequence number; ErrFenced when the attempt no longer owns the job. In
// the same transaction the job's checkpoints older than its latest
// Storage.KeepCheckpoints are pruned (their archives are deleted by the
// control plane, PruneCheckpoints). A checkpoint that would take the job's
// project past its stored-bytes quota is refused with ErrQuotaExceeded.
func (s *Store) RecordCheckpoint(ctx context.Context, id uuid.UUID, attempt int, a queue.ArchiveRecord) (int, error) {
	limits := s.Storage.WithDefaults()
	var seq int32
	var repeated bool
	err := s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
		if err := checkQuota(ctx, q, limits, id, a.Bytes); err != nil {
			return nil, err
		}
		var err error
		seq, err = q.CheckpointInsert(ctx, db.CheckpointInsertParams{JobID: id, Attempt: int32(attempt), Bytes: a.Bytes, Sha256: a.SHA256, Region: a.Region, StoreUri: a.StoreURI})
		if isUniqueViolation(err) {
			repeated = true
			return nil, err
		}
		if errors.Is(err, sql.ErrNoRows) {
			return nil, queue.ErrFenced
		}
		if err != nil {
			return nil, fmt.Errorf("recording checkpoint of job %s: %w", id, err)
		}
		if err := q.CheckpointPruneJob(ctx, db.CheckpointPruneJobParams{JobID: id, Keep: int32(limits.KeepCheckpoints)}); err != nil {
			return nil, fmt.Errorf("pruning the checkpoints of job %s: %w", id, err)
		}
		return nil, nil
	})
	if repeated || queue.RecordRefused(err) {
		// Recorded before (a repeated request, whose first reply was lost
		// and which the attempt's end or the quota would now refuse): the
		// transaction changed nothing, and the first record's number is
		// the answer. A refusal must mean nothing names the archive, since
		// its maker then deletes it.
		cp, gerr := s.q.CheckpointGetByURI(ctx, db.CheckpointGetByURIParams{JobID: id, StoreUri: a.StoreURI})
		switch {
		case gerr == nil && cp.Attempt == int32(attempt):
			return int(cp.Seq), nil
		case gerr == nil:
			return 0, fmt.Errorf("recording checkpoint of job %s: %s was recorded by attempt %d", id, a.StoreURI, cp.Attempt)
		case !errors.Is(gerr, sql.ErrNoRows):
			return 0, fmt.Errorf("recording checkpoint of job %s: %w", id, gerr)
		case repeated:
			return 0, fmt.Errorf("recording checkpoint of job %s: %s is recorded already", id, a.StoreURI)
		}
	}
	if err != nil {
		return 0, err
	}
	return int(seq), nil
}

// Succeed records the job's outputs and its success under attempt.
func (s *Store) Succeed(ctx context.Context, id uuid.UUID, attempt int, outputs *queue.ArchiveRecord) error {
	ref := queue.PoolAttemptRef{AttemptRef: queue.AttemptRef{JobID: id, Attempt: attempt}}
	if outputs == nil {
		recorded, err := s.SucceedInPools(ctx, []queue.PoolAttemptRef{ref})
		if err == nil && !recorded[0] {
			err = queue.ErrFenced
		}
		return err
	}
	return s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
		n, err := q.ResultInsert(ctx, db.ResultInsertParams{JobID: id, Attempt: int32(attempt), Bytes: outputs.Bytes, Sha256: outputs.SHA256, Region: outputs.Region, StoreUri: outputs.StoreURI})
		if err != nil {
			return nil, fmt.Errorf("recording outputs of job %s: %w", id, err)
		}
		if n == 0 {
			return nil, queue.ErrFenced
		}
		recorded, events, err := succeedMany(ctx, q, []queue.PoolAttemptRef{ref})
		if err == nil && !recorded[0] {
			err = queue.ErrFenced
		}
		return events, err
	})
}

// SucceedMany records the success of a batch of attempts that left no
// outputs, in one statement. recorded[i] is false when refs[i] no longer
// owns its job (fenced out); such an attempt must not acknowledge.
func (s *Store) SucceedMany(ctx context.Context, refs []queue.AttemptRef) (recorded []bool, err error) {
	inPools := make([]queue.PoolAttemptRef, len(refs))
	for i, r := range refs {
		inPools[i].AttemptRef = r
	}
	return s.SucceedInPools(ctx, inPools)
}

// SucceedInPools is SucceedMany for attempts reported by workers of their
// refs' pools: an attempt another pool claimed is not recorded either.
func (s *Store) SucceedInPools(ctx context.Context, refs []queue.PoolAttemptRef) (recorded []bool, err error) {
	recorded, events, err := succeedMany(ctx, s.hot, refs)
	if err != nil {
		return nil, err
	}
	s.announce(ctx, events)
	return recorded, nil
}

func succeedMany(ctx context.Context, q *db.Queries, refs []queue.PoolAttemptRef) ([]bool, []queue.Event, error) {
	params := db.JobSucceedManyParams{Ids: make([]uuid.UUID, len(refs)), Attempts: make([]int32, len(refs)), Pools: make([]string, len(refs))}
	for i, r := range refs {
		params.Ids[i], params.Attempts[i], params.Pools[i] = r.JobID, int32(r.Attempt), r.Pool
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
	var events []queue.Event
	zero := 0
	for i, r := range refs {
		if recorded[i] = done[r.JobID]; recorded[i] {
			events = append(events, eventOf(r.JobID, queue.StateSucceeded, r.Attempt, "succeeded", &zero))
		}
	}
	return recorded, events, nil
}

func endAttempt(ctx context.Context, q *db.Queries, id uuid.UUID, attempt int, outcome string, exit *int, state queue.JobState, msg string) ([]queue.Event, error) {
	if err := q.AttemptEnd(ctx, db.AttemptEndParams{JobID: id, Attempt: int32(attempt), Outcome: outcome, ExitCode: nullInt(exit)}); err != nil {
		return nil, err
	}
	ev, err := recordEvent(ctx, q, id, state, attempt, msg, exit)
	ev.Outcome = outcome
	return []queue.Event{ev}, err
}

// Fail finalises the job as failed under attempt.
func (s *Store) Fail(ctx context.Context, id uuid.UUID, attempt int, outcome string, exit *int, reason string) error {
	return s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
		n, err := q.JobFail(ctx, db.JobFailParams{ID: id, Attempt: int32(attempt), ExitCode: nullInt(exit), Reason: reason})
		if err != nil {
			return nil, fmt.Errorf("recording failure of job %s: %w", id, err)
		}
		if n == 0 {
			return nil, queue.ErrFenced
		}
		return endAttempt(ctx, q, id, attempt, outcome, exit, queue.StateFailed, reason)
	})
}

// Requeue hands a running job back to its pool after an error (errors+1), a
// preemption or a host error (preemptions+1; only a preemption counts in the
// pool's record), a move the control plane asked for or a worker's shutdown
// (neither), under attempt.
func (s *Store) Requeue(ctx context.Context, id uuid.UUID, attempt int, outcome string, exit *int, reason string) error {
	addErr, addPre := 0, 0
	switch outcome {
	case queue.OutcomePreempted, queue.OutcomeHostError:
		addPre = 1
	case queue.OutcomeMoved, queue.OutcomeShutdown:
	default:
		addErr = 1
	}
	return s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
		n, err := q.JobRequeue(ctx, db.JobRequeueParams{ID: id, Attempt: int32(attempt), AddErrors: int32(addErr), AddPreemptions: int32(addPre), ExitCode: nullInt(exit), Reason: reason})
		if err != nil {
			return nil, fmt.Errorf("requeueing job %s: %w", id, err)
		}
		if n == 0 {
			return nil, queue.ErrFenced
		}
		if outcome == queue.OutcomePreempted {
			if err := s.countPreemption(ctx, q, id, attempt); err != nil {
				return nil, err
			}
		}
		return endAttempt(ctx, q, id, attempt, outcome, exit, queue.StatePlaced, reason)
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
	return s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
		attempt, err := q.JobCancel(ctx, db.JobCancelParams{ID: id, Reason: reason})
		if errors.Is(err, sql.ErrNoRows) {
			row, err := q.JobGetByID(ctx, id)
			if errors.Is(err, sql.ErrNoRows) {
				return nil, fmt.Errorf("job %s: %w", id, queue.ErrNotFound)
			}
			if err != nil {
				return nil, err
			}
			return nil, &queue.NotClaimableError{State: queue.JobState(row.State)}
		}
		if err != nil {
			return nil, fmt.Errorf("cancelling job %s: %w", id, err)
		}
		ev, err := recordEvent(ctx, q, id, queue.StateCancelled, int(attempt), reason, nil)
		return []queue.Event{ev}, err
	})
}

// Retry runs a finished job again under placement p, numbered after the
// placement it finished with (or 1 for a job rejected before any), in one
// transaction: the job goes back to pending with its error and preemption
// counts at zero, its trail records note (who asked, how it had ended), p's
// budget guards are checked as a new placement's are, and the job is
// placed. Its attempts and checkpoints stay, so its next attempt resumes
// from its latest checkpoint. job is the job as read when p was decided:
// when its state or placement version changed since, or it was never
// retryable, Retry returns a *queue.NotRetryableError; when a budget guard
// no longer holds, a *queue.RejectionError. Either way nothing changed.
// With fresh, the job's checkpoints are dropped in the same transaction
// (their archives deleted as pruned ones are), so that its next attempt
// starts from nothing; sequence numbers go on from where they were.
func (s *Store) Retry(ctx context.Context, job *queue.Job, p queue.Placement, note string, fresh bool) error {
	if !job.State.Retryable() {
		return &queue.NotRetryableError{State: job.State}
	}
	p.Version = job.PlacementVersion + 1
	placed := []queue.PlacedJob{{JobID: job.ID, Placement: p}}
	var snapshots []string
	err := s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
		retried, err := reopen(ctx, q, job, note, fresh)
		if err != nil {
			return nil, err
		}
		kept, failed, err := checkGuards(ctx, q, placed)
		if err != nil {
			return nil, err
		}
		if reason, ok := failed[job.ID]; ok || len(kept) == 0 {
			return nil, &queue.RejectionError{Reason: reason}
		}
		if snapshots, err = s.storeSnapshots(ctx, q, kept); err != nil {
			return nil, err
		}
		done, events, err := placeMany(ctx, q, kept)
		if err != nil {
			return nil, err
		}
		if len(done) == 0 {
			return nil, fmt.Errorf("retrying job %s: its placement %d was not recorded", job.ID, p.Version)
		}
		return append([]queue.Event{retried}, events...), nil
	})
	if err == nil {
		s.rememberSnapshots(ctx, snapshots)
	}
	return err
}

// reopen brings a finished job back to pending for Retry and RetryWaiting:
// its counts start again, its checkpoints are dropped with fresh, and its
// trail records note.
func reopen(ctx context.Context, q *db.Queries, job *queue.Job, note string, fresh bool) (queue.Event, error) {
	n, err := q.JobRetry(ctx, db.JobRetryParams{ID: job.ID, State: string(job.State), PlacementVersion: int32(job.PlacementVersion)})
	if err != nil {
		return queue.Event{}, fmt.Errorf("retrying job %s: %w", job.ID, err)
	}
	if n == 0 {
		row, err := q.JobGetByID(ctx, job.ID)
		if errors.Is(err, sql.ErrNoRows) {
			return queue.Event{}, fmt.Errorf("job %s: %w", job.ID, queue.ErrNotFound)
		}
		if err != nil {
			return queue.Event{}, err
		}
		return queue.Event{}, &queue.NotRetryableError{State: queue.JobState(row.State)}
	}
	if fresh {
		if err := q.CheckpointPruneJob(ctx, db.CheckpointPruneJobParams{JobID: job.ID, Keep: 0}); err != nil {
			return queue.Event{}, fmt.Errorf("dropping the checkpoints of job %s: %w", job.ID, err)
		}
	} else {
		left, err := q.CheckpointsLeft(ctx, job.ID)
		if err != nil {
			return queue.Event{}, fmt.Errorf("reading the checkpoints of job %s: %w", job.ID, err)
		}
		if left.CheckpointSeq > 0 && left.LeftCount == 0 {
			note += "; its checkpoints were deleted storage.checkpoint_retention after it finished, so it starts from nothing"
		}
	}
	return recordEvent(ctx, q, job.ID, queue.StatePending, job.Attempt, note, nil)
}

// MarkDead finalises a job that can no longer make progress, under the
// attempt that runs it; ErrFenced when that attempt no longer owns the job.
func (s *Store) MarkDead(ctx context.Context, id uuid.UUID, attempt int, reason string) error {
	return s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
		n, err := q.JobMarkDead(ctx, db.JobMarkDeadParams{ID: id, Attempt: int32(attempt), Reason: reason})
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, queue.ErrFenced
		}
		if err := q.AttemptEnd(ctx, db.AttemptEndParams{JobID: id, Attempt: int32(attempt), Outcome: queue.OutcomePreempted}); err != nil {
			return nil, err
		}
		ev, err := recordEvent(ctx, q, id, queue.StateDead, attempt, reason, nil)
		return []queue.Event{ev}, err
	})
}

// Job returns one job.
func (s *Store) Job(ctx context.Context, id uuid.UUID) (*queue.Job, error) {
	row, err := s.q.JobGetByID(ctx, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("job %s: %w", id, queue.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading job %s: %w", id, err)
	}
	return jobFromRow(row)
}

// List returns jobs, newest first.
func (s *Store) List(ctx context.Context, f queue.ListFilter) ([]*queue.Job, error) {
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
	out := make([]*queue.Job, 0, len(rows))
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
func (s *Store) Attempts(ctx context.Context, id uuid.UUID) ([]queue.Attempt, error) {
	rows, err := s.q.AttemptListByJob(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("reading attempts of job %s: %w", id, err)
	}
	out := make([]queue.Attempt, len(rows))
	for i, r := range rows {
		out[i] = queue.Attempt{Attempt: int(r.Attempt), WorkerID: r.WorkerID, Host: r.Host, PID: int(r.Pid), Pool: r.Pool,
			StartedAt: r.StartedAt, HeartbeatAt: r.HeartbeatAt, EndedAt: timePtr(r.EndedAt), Outcome: r.Outcome, ExitCode: intPtr(r.ExitCode),
			NodeID: r.NodeID, CanaryRunID: r.CanaryRunID.Int64}
	}
	return out, nil
}

// Checkpoints returns a job's checkpoints in sequence order.
func (s *Store) Checkpoints(ctx context.Context, id uuid.UUID) ([]queue.Checkpoint, error) {
	rows, err := s.q.CheckpointListByJob(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("reading checkpoints of job %s: %w", id, err)
	}
	out := make([]queue.Checkpoint, len(rows))
	for i, r := range rows {
		out[i] = checkpointFromRow(r)
	}
	return out, nil
}

// EventsOf returns a job's audit trail, oldest first.
func (s *Store) EventsOf(ctx context.Context, id uuid.UUID) ([]queue.Event, error) {
	rows, err := s.q.JobEventListByJob(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("reading events of job %s: %w", id, err)
	}
	out := make([]queue.Event, len(rows))
	for i, r := range rows {
		out[i] = queue.Event{JobID: r.JobID, At: r.At, State: queue.JobState(r.State), Attempt: int(r.Attempt), Message: r.Message}
		// Only a retry follows an end.
		out[i].Superseded = out[i].State.Terminal() && i < len(rows)-1
	}
	return out, nil
}

// LatestPlacement returns the job's current placement with its decision.
func (s *Store) LatestPlacement(ctx context.Context, id uuid.UUID) (*queue.Placement, error) {
	r, err := s.q.PlacementLatest(ctx, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("placement of job %s: %w", id, queue.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return &queue.Placement{Version: int(r.Version), Pool: r.Pool, Region: r.Region, Residency: r.Residency, Countries: r.Countries,
		PriceMicros: r.PriceMicros, Currency: r.Currency, Decision: r.Decision,
		EstimateMicros: r.EstimateMicros, EstimateCurrency: r.EstimateCurrency, Provider: r.Provider}, nil
}

// PoolLine says where a placed job stands in its pool's line.
func (s *Store) PoolLine(ctx context.Context, job *queue.Job) (*queue.PoolLine, error) {
	r, err := s.q.JobPoolLine(ctx, db.JobPoolLineParams{Pool: job.Pool, Since: job.UpdatedAt, ID: job.ID})
	if err != nil {
		return nil, fmt.Errorf("reading the line of pool %s: %w", job.Pool, err)
	}
	return &queue.PoolLine{Pool: job.Pool, Ahead: int(r.Ahead), Running: int(r.Running)}, nil
}

// Result returns where the job's outputs were stored.
func (s *Store) Result(ctx context.Context, id uuid.UUID) (*queue.ArchiveRecord, error) {
	r, err := s.q.ResultGet(ctx, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("outputs of job %s: %w", id, queue.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return &queue.ArchiveRecord{Bytes: r.Bytes, SHA256: r.Sha256, Region: r.Region, StoreURI: r.StoreUri}, nil
}

// ListUnsettled returns pending jobs older than pendingAge and placed or
// lease-expired running jobs quiet for longer than placedAge.
func (s *Store) ListUnsettled(ctx context.Context, pendingAge, placedAge time.Duration, limit int) ([]queue.Unsettled, error) {
	rows, err := s.q.JobListUnsettled(ctx, db.JobListUnsettledParams{PendingSeconds: pendingAge.Seconds(), PlacedSeconds: placedAge.Seconds(), MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("listing unsettled jobs: %w", err)
	}
	out := make([]queue.Unsettled, len(rows))
	for i, r := range rows {
		out[i] = queue.Unsettled{ID: r.ID, State: queue.JobState(r.State), Pool: r.Pool.String, PlacementVersion: int(r.PlacementVersion)}
	}
	return out, nil
}

func jobFromRow(r db.JobRow) (*queue.Job, error) {
	var spec queue.Spec
	if err := json.Unmarshal(r.Spec, &spec); err != nil {
		return nil, fmt.Errorf("decoding spec of job %s: %w", r.ID, err)
	}
	j := jobWithoutSpec(r)
	j.Spec = &spec
	return j, nil
}

// jobWithoutSpec converts every column of a job's row but its spec.
func jobWithoutSpec(r db.JobRow) *queue.Job {
	return &queue.Job{
		ID: r.ID, Project: r.Project, Name: r.Name, IdempotencyKey: r.IdempotencyKey.String,
		State: queue.JobState(r.State), Attempt: int(r.Attempt), Errors: int(r.Errors), Preemptions: int(r.Preemptions),
		PlacementVersion: int(r.PlacementVersion), Pool: r.Pool.String, ExitCode: intPtr(r.ExitCode), Reason: r.Reason,
		LeaseExpiresAt: timePtr(r.LeaseExpiresAt), SubmittedAt: r.SubmittedAt, UpdatedAt: r.UpdatedAt, FinalizedAt: timePtr(r.FinalizedAt),
	}
}

func checkpointFromRow(r db.Checkpoint) queue.Checkpoint {
	return queue.Checkpoint{JobID: r.JobID, Seq: int(r.Seq), Attempt: int(r.Attempt), Bytes: r.Bytes, SHA256: r.Sha256, Region: r.Region, StoreURI: r.StoreUri, CreatedAt: r.CreatedAt}
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

// isUniqueViolation reports whether err is PostgreSQL's unique_violation.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// AttemptPools returns the pool that claimed each of refs' attempts; an
// attempt that does not exist is left out.
func (s *Store) AttemptPools(ctx context.Context, refs []queue.AttemptRef) (map[queue.AttemptRef]string, error) {
	params := db.AttemptPoolsParams{JobIds: make([]uuid.UUID, len(refs)), Attempts: make([]int32, len(refs))}
	for i, r := range refs {
		params.JobIds[i], params.Attempts[i] = r.JobID, int32(r.Attempt)
	}
	rows, err := s.q.AttemptPools(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("reading the pools of %d attempts: %w", len(refs), err)
	}
	out := make(map[queue.AttemptRef]string, len(rows))
	for _, r := range rows {
		out[queue.AttemptRef{JobID: r.JobID, Attempt: int(r.Attempt)}] = r.Pool
	}
	return out, nil
}

// RunningWithDeadline lists the running jobs whose tier the spot strategy
// advises (spot-then-on-demand, with a deadline and an expected duration),
// with the pool each runs in.
func (s *Store) RunningWithDeadline(ctx context.Context) ([]queue.JobInPool, error) {
	rows, err := s.q.JobsRunningWithDeadline(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing running jobs with a deadline: %w", err)
	}
	out := make([]queue.JobInPool, len(rows))
	for i, r := range rows {
		out[i] = queue.JobInPool{ID: r.ID, Pool: r.Pool}
	}
	return out, nil
}
