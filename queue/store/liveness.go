package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/db"
)

// FenceLost hands back the attempts that worker, pulling from pool, held
// when the control plane lost it: each job still running under one of refs
// goes back to placed, its attempt ends as lost, and any later write of that
// attempt fails. It returns the attempts it handed back; an attempt that has
// ended meanwhile, or that another worker or pool claimed, is left alone.
func (s *Store) FenceLost(ctx context.Context, pool, worker string, refs []queue.AttemptRef, reason string) ([]queue.AttemptRef, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	ids := make([]uuid.UUID, len(refs))
	attempts := make([]int32, len(refs))
	for i, r := range refs {
		ids[i], attempts[i] = r.JobID, int32(r.Attempt)
	}
	rows, err := s.q.JobFenceLost(ctx, db.JobFenceLostParams{Ids: ids, Attempts: attempts, WorkerID: worker, Pool: pool, Reason: reason})
	if err != nil {
		return nil, fmt.Errorf("handing back the attempts of lost worker %s: %w", worker, err)
	}
	fenced := make([]queue.AttemptRef, len(rows))
	events := make([]queue.Event, len(rows))
	for i, r := range rows {
		fenced[i] = queue.AttemptRef{JobID: r.ID, Attempt: int(r.Attempt)}
		events[i] = eventOf(r.ID, queue.StatePlaced, int(r.Attempt), reason, nil)
		events[i].Outcome = queue.OutcomeLost
	}
	s.announce(ctx, events)
	return fenced, nil
}
