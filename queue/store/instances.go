package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/db"
)

// RecordInstance records a launch, with its "requested" event, before the
// provider is asked. Recording the same id twice is an error: every launch
// has its own id and client token.
func (s *Store) RecordInstance(ctx context.Context, n queue.NewInstance) (*queue.Instance, error) {
	row, err := s.q.InstanceInsert(ctx, db.InstanceInsertParams{
		ID: n.ID, Provider: n.Provider, Pool: n.Pool, Project: n.Project, ClientToken: n.ClientToken, Slots: int32(n.Slots),
		PriceMicros: n.PriceMicros, Currency: n.Currency, Billing: string(n.Billing), Message: n.Message,
	})
	if err != nil {
		return nil, fmt.Errorf("recording instance %s of pool %s: %w", n.ID, n.Pool, err)
	}
	s.instancesChanged()
	return instanceFromRow(db.Instance(row)), nil
}

// ChangeInstance moves an instance from one of c.From to c.To and records
// the event. It returns queue.ErrInstanceMoved when the instance is in none of
// c.From, so a repeated or raced change does nothing.
func (s *Store) ChangeInstance(ctx context.Context, c queue.InstanceChange) (*queue.Instance, error) {
	from := make([]db.InstanceState, len(c.From))
	for i, st := range c.From {
		from[i] = db.InstanceState(st)
	}
	row, err := s.q.InstanceTransition(ctx, db.InstanceTransitionParams{
		ID: c.ID, FromStates: from, State: db.InstanceState(c.To), ProviderID: c.ProviderID,
		LaunchedAt: nullTime(c.LaunchedAt), EndedAt: nullTime(c.EndedAt), Reason: c.Reason,
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("instance %s: not in %v: %w", c.ID, c.From, queue.ErrInstanceMoved)
	}
	if err != nil {
		return nil, fmt.Errorf("moving instance %s to %s: %w", c.ID, c.To, err)
	}
	s.instancesChanged()
	return instanceFromRow(db.Instance(row)), nil
}

// SetWorkerSeen records a sign of life of the instance's worker; an older
// one than recorded changes nothing.
func (s *Store) SetWorkerSeen(ctx context.Context, id string, at time.Time) error {
	return s.q.InstanceSetWorkerSeen(ctx, db.InstanceSetWorkerSeenParams{ID: id, SeenAt: at})
}

// Instance reads one instance.
func (s *Store) Instance(ctx context.Context, id string) (*queue.Instance, error) {
	row, err := s.q.InstanceGet(ctx, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("instance %s: %w", id, queue.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return instanceFromRow(row), nil
}

// MaxInstanceRows bounds one listing of instances.
const MaxInstanceRows = 10000

// Instances lists instances, oldest first, of one pool and one state when
// they are not empty.
func (s *Store) Instances(ctx context.Context, pool string, state queue.InstanceState) ([]*queue.Instance, error) {
	rows, err := s.q.InstanceList(ctx, db.InstanceListParams{
		Pool:    sql.NullString{String: pool, Valid: pool != ""},
		State:   db.NullInstanceState{InstanceState: db.InstanceState(state), Valid: state != ""},
		MaxRows: MaxInstanceRows,
	})
	if err != nil {
		return nil, fmt.Errorf("listing instances: %w", err)
	}
	return instancesFromRows(rows), nil
}

// LiveInstances lists the instances that may be billed or come up.
func (s *Store) LiveInstances(ctx context.Context) ([]*queue.Instance, error) {
	rows, err := s.q.InstanceListLive(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing live instances: %w", err)
	}
	return instancesFromRows(rows), nil
}

// BilledInstances lists the instances billed at some time after since.
func (s *Store) BilledInstances(ctx context.Context, since time.Time) ([]*queue.Instance, error) {
	rows, err := s.q.InstanceListBilledSince(ctx, since)
	if err != nil {
		return nil, fmt.Errorf("listing billed instances: %w", err)
	}
	return instancesFromRows(rows), nil
}

// LaunchesSince counts the pool's launches requested after since.
func (s *Store) LaunchesSince(ctx context.Context, pool string, since time.Time) (int, error) {
	n, err := s.q.InstanceCountLaunchedSince(ctx, db.InstanceCountLaunchedSinceParams{Pool: pool, Since: since})
	return int(n), err
}

// InstanceEvents lists an instance's state changes, oldest first.
func (s *Store) InstanceEvents(ctx context.Context, id string) ([]queue.InstanceEvent, error) {
	rows, err := s.q.InstanceEventList(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("listing the events of instance %s: %w", id, err)
	}
	out := make([]queue.InstanceEvent, len(rows))
	for i, r := range rows {
		out[i] = instanceEventOf(db.InstanceEventListUnannouncedRow(r))
	}
	return out, nil
}

// UnannouncedInstanceEvents lists up to limit committed instance events not
// yet announced on JetStream, oldest first.
func (s *Store) UnannouncedInstanceEvents(ctx context.Context, limit int) ([]queue.InstanceEvent, error) {
	rows, err := s.q.InstanceEventListUnannounced(ctx, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("listing unannounced instance events: %w", err)
	}
	out := make([]queue.InstanceEvent, len(rows))
	for i, r := range rows {
		out[i] = instanceEventOf(r)
	}
	return out, nil
}

// SetInstanceEventsAnnounced marks instance events announced.
func (s *Store) SetInstanceEventsAnnounced(ctx context.Context, ids []int64) error {
	if err := s.q.InstanceEventSetAnnounced(ctx, ids); err != nil {
		return fmt.Errorf("marking %d instance events announced: %w", len(ids), err)
	}
	return nil
}

func instanceEventOf(r db.InstanceEventListUnannouncedRow) queue.InstanceEvent {
	return queue.InstanceEvent{ID: r.ID, InstanceID: r.InstanceID, Pool: r.Pool, Provider: r.Provider, Project: r.Project,
		At: r.At, State: queue.InstanceState(r.State), Message: r.Message}
}

// instancesChanged tells the sink that instance events committed.
func (s *Store) instancesChanged() {
	if s.InstanceSink != nil {
		s.InstanceSink.InstanceEventsRecorded()
	}
}

// WorkerActivity reads what the instances' workers have written to the
// system of record: their running attempts, their latest activity and their
// nodes' canary records.
func (s *Store) WorkerActivity(ctx context.Context, ids []string) (map[string]queue.WorkerActivity, error) {
	rows, err := s.q.InstanceWorkerActivity(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("reading the activity of %d workers: %w", len(ids), err)
	}
	out := make(map[string]queue.WorkerActivity, len(rows))
	for _, r := range rows {
		out[r.ID] = queue.WorkerActivity{Busy: int(r.Busy), LastActive: r.LastActiveAt, CanaryAt: timePtr(r.LastCanaryAt),
			QuarantinedAt: timePtr(r.QuarantinedAt), QuarantineReason: r.QuarantineReason}
	}
	return out, nil
}

// InstanceAttempts lists the attempts that ran on the instances.
func (s *Store) InstanceAttempts(ctx context.Context, ids []string) ([]queue.InstanceAttempt, error) {
	rows, err := s.q.InstanceAttemptsOf(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("listing the attempts of %d instances: %w", len(ids), err)
	}
	out := make([]queue.InstanceAttempt, len(rows))
	for i, r := range rows {
		out[i] = queue.InstanceAttempt{InstanceID: r.NodeID, JobID: r.JobID.String(), Attempt: int(r.Attempt),
			Project: r.Project, From: r.StartedAt, To: r.Until}
	}
	return out, nil
}

// PoolDemand lists, per pool, the jobs waiting to be claimed and running.
func (s *Store) PoolDemand(ctx context.Context) ([]queue.PoolDemand, error) {
	rows, err := s.q.JobPoolDemand(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the demand per pool: %w", err)
	}
	var out []queue.PoolDemand
	for _, r := range rows {
		if len(out) == 0 || out[len(out)-1].Pool != r.Pool {
			out = append(out, queue.PoolDemand{Pool: r.Pool, OldestWaiting: r.OldestWaiting, WaitingByProject: map[string]int{}})
		}
		d := &out[len(out)-1]
		d.Waiting += int(r.Waiting)
		d.Running += int(r.Running)
		if r.Waiting > 0 {
			d.WaitingByProject[r.Project] += int(r.Waiting)
			if r.OldestWaiting.Before(d.OldestWaiting) {
				d.OldestWaiting = r.OldestWaiting
			}
		}
	}
	return out, nil
}

// WaitingInPool lists up to limit jobs placed on pool and not yet claimed,
// longest waiting first.
func (s *Store) WaitingInPool(ctx context.Context, pool string, limit int) ([]uuid.UUID, error) {
	ids, err := s.q.JobListWaitingInPool(ctx, db.JobListWaitingInPoolParams{Pool: pool, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("listing the jobs waiting in pool %s: %w", pool, err)
	}
	return ids, nil
}

// NoteJob adds a note to a job's audit trail (shown by gpuq status) under
// its current state and attempt.
func (s *Store) NoteJob(ctx context.Context, id uuid.UUID, message string) error {
	n, err := s.q.JobEventNote(ctx, db.JobEventNoteParams{ID: id, Message: message})
	if err != nil {
		return fmt.Errorf("noting on job %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("job %s: %w", id, queue.ErrNotFound)
	}
	return nil
}

func instancesFromRows(rows []db.Instance) []*queue.Instance {
	out := make([]*queue.Instance, len(rows))
	for i, r := range rows {
		out[i] = instanceFromRow(r)
	}
	return out
}

func instanceFromRow(r db.Instance) *queue.Instance {
	return &queue.Instance{ID: r.ID, Provider: r.Provider, Pool: r.Pool, Project: r.Project, State: queue.InstanceState(r.State),
		ClientToken: r.ClientToken, ProviderID: r.ProviderID, Slots: int(r.Slots), PriceMicros: r.PriceMicros,
		Currency: r.Currency, Billing: queue.Billing(r.Billing), RequestedAt: r.RequestedAt,
		LaunchedAt: timePtr(r.LaunchedAt), ReadyAt: timePtr(r.ReadyAt), WorkerSeenAt: timePtr(r.WorkerSeenAt),
		DrainAt: timePtr(r.DrainAt), EndedAt: timePtr(r.EndedAt), Reason: r.Reason}
}

func nullTime(t *time.Time) sql.NullTime {
	if t == nil {
		return sql.NullTime{}
	}
	return sql.NullTime{Time: *t, Valid: true}
}

// RecordExhaustion leaves a pool alone until e.Until; a pool already left
// alone at e.At keeps its first reason and end.
func (s *Store) RecordExhaustion(ctx context.Context, e queue.PoolExhaustion) error {
	err := s.q.PoolExhaustionRecord(ctx, db.PoolExhaustionRecordParams{Pool: e.Pool, ExhaustedAt: e.At, Until: e.Until, Reason: e.Reason})
	if err != nil {
		return fmt.Errorf("recording pool %s exhausted: %w", e.Pool, err)
	}
	return nil
}

// Exhaustions lists the pools still left alone at a time.
func (s *Store) Exhaustions(ctx context.Context, at time.Time) ([]queue.PoolExhaustion, error) {
	rows, err := s.q.PoolExhaustionListActive(ctx, at)
	if err != nil {
		return nil, fmt.Errorf("reading exhausted pools: %w", err)
	}
	out := make([]queue.PoolExhaustion, len(rows))
	for i, r := range rows {
		out[i] = queue.PoolExhaustion{Pool: r.Pool, At: r.ExhaustedAt, Until: r.Until, Reason: r.Reason}
	}
	return out, nil
}
