package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/db"
)

// Dependencies returns the jobs of ids that exist, for queue.Sequence.
func (s *Store) Dependencies(ctx context.Context, ids []uuid.UUID) ([]queue.Dependency, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.q.JobDependencies(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("reading the jobs %d jobs run after: %w", len(ids), err)
	}
	out := make([]queue.Dependency, len(rows))
	for i, r := range rows {
		out[i] = queue.Dependency{ID: r.ID, Project: r.Project, Name: r.Name, State: queue.JobState(r.State), Reason: r.Reason}
	}
	return out, nil
}

// Dependents returns up to limit jobs of job's project that run after it
// (their spec.after or spec.after_ended names it), in the order they were
// submitted.
func (s *Store) Dependents(ctx context.Context, job *queue.Job, limit int) ([]queue.Dependency, error) {
	rows, err := s.q.JobDependents(ctx, db.JobDependentsParams{ID: job.ID.String(), Project: job.Project, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("reading the jobs that run after job %s: %w", job.ID, err)
	}
	out := make([]queue.Dependency, len(rows))
	for i, r := range rows {
		out[i] = queue.Dependency{ID: r.ID, Project: job.Project, Name: r.Name, State: queue.JobState(r.State)}
	}
	return out, nil
}

// WaitingSettled returns up to limit waiting jobs, longest waiting first,
// none of whose jobs to run after is unfinished: each is to be placed, or
// cancelled for a job it runs after that ended otherwise.
func (s *Store) WaitingSettled(ctx context.Context, limit int) ([]uuid.UUID, error) {
	ids, err := s.q.JobListWaitingSettled(ctx, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("listing waiting jobs: %w", err)
	}
	return ids, nil
}

// Release settles waiting jobs in one transaction: each job of cancel is
// cancelled with its reason, and the jobs d places or rejects take those
// decisions as CommitPlacements commits them. A job no longer waiting (a
// user cancelled it, another server released it) is left alone. It returns
// the placements that took effect.
func (s *Store) Release(ctx context.Context, d queue.Decided, cancel map[uuid.UUID]string) ([]queue.PlacedJob, error) {
	var done []queue.PlacedJob
	var snapshots []string
	err := s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
		ids := slices.Collect(maps.Keys(d.Rejected))
		for _, p := range d.Placed {
			ids = append(ids, p.JobID)
		}
		ids = append(ids, slices.Collect(maps.Keys(cancel))...)
		// In id order, so that concurrent releases lock job rows in one order.
		slices.SortFunc(ids, idOrder)
		var events []queue.Event
		released := map[uuid.UUID]bool{}
		for _, id := range ids {
			if reason, ok := cancel[id]; ok {
				attempts, err := q.JobCancelWaiting(ctx, db.JobCancelWaitingParams{ID: id, Reason: reason})
				if err != nil {
					return nil, fmt.Errorf("cancelling job %s: %w", id, err)
				}
				for _, attempt := range attempts {
					ev, err := recordEvent(ctx, q, id, queue.StateCancelled, int(attempt), reason, nil)
					if err != nil {
						return nil, err
					}
					events = append(events, ev)
				}
				continue
			}
			n, err := q.JobRelease(ctx, id)
			if err != nil {
				return nil, fmt.Errorf("releasing job %s: %w", id, err)
			}
			released[id] = n > 0
		}
		mine := queue.Decided{Rejected: map[uuid.UUID]string{}}
		for _, p := range d.Placed {
			if released[p.JobID] {
				mine.Placed = append(mine.Placed, p)
			}
		}
		for id, reason := range d.Rejected {
			if released[id] {
				mine.Rejected[id] = reason
			}
		}
		var err error
		if snapshots, err = s.storeSnapshots(ctx, q, mine.Placed); err != nil {
			return nil, err
		}
		placed, more, err := commitPlacements(ctx, q, mine)
		done = placed
		return append(events, more...), err
	})
	if err != nil {
		return nil, err
	}
	s.rememberSnapshots(ctx, snapshots)
	return done, nil
}

// RetryWaiting runs a finished job that runs after others again as Retry
// does, but records it waiting, with msg on its trail, rather than placing
// it: a job it runs after has not finished.
func (s *Store) RetryWaiting(ctx context.Context, job *queue.Job, note, msg string, fresh bool) error {
	if !job.State.Retryable() {
		return &queue.NotRetryableError{State: job.State}
	}
	return s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
		retried, err := reopen(ctx, q, job, note, fresh)
		if err != nil {
			return nil, err
		}
		waiting, err := wait(ctx, q, job.ID, job.Attempt, msg)
		return append([]queue.Event{retried}, waiting...), err
	})
}

// wait records a pending job as waiting, with msg on its trail; a job no
// longer pending is left alone.
func wait(ctx context.Context, q *db.Queries, id uuid.UUID, attempt int, msg string) ([]queue.Event, error) {
	n, err := q.JobWait(ctx, id)
	if err != nil || n == 0 {
		return nil, err
	}
	ev, err := recordEvent(ctx, q, id, queue.StateWaiting, attempt, msg, nil)
	return []queue.Event{ev}, err
}

// idOrder orders job ids as their text sorts, the order in which a
// transaction locks several jobs' rows.
func idOrder(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) }
