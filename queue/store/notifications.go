package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/db"
)

// NotificationsDue returns at most limit ends waiting to be posted to their
// job's webhook whose next try is due, oldest end first.
func (s *Store) NotificationsDue(ctx context.Context, limit int) ([]queue.DueNotification, error) {
	rows, err := s.q.NotificationsDue(ctx, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("reading the notifications due: %w", err)
	}
	out := make([]queue.DueNotification, 0, len(rows))
	for _, r := range rows {
		d := queue.DueNotification{Tries: int(r.Tries), Job: queue.NotifiedJob{
			ID: r.ID, Name: r.Name, Project: r.Project, State: queue.JobState(r.State), ExitCode: intPtr(r.ExitCode),
			Reason: r.Reason, Attempts: int(r.Attempt), Errors: int(r.Errors), Preemptions: int(r.Preemptions),
			SubmittedAt: r.SubmittedAt.UTC(), EndedAt: r.FinalizedAt.UTC()}}
		if err := json.Unmarshal(r.Notify, &d.Notify); err != nil {
			return nil, fmt.Errorf("job %s: reading spec.notify: %w", r.ID, err)
		}
		if err := json.Unmarshal(r.Labels, &d.Job.Labels); err != nil {
			return nil, fmt.Errorf("job %s: reading spec.labels: %w", r.ID, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// NotificationTried records a try of posting job's end at endedAt:
// outcome queue.NotifyPending with the next try at next, or
// queue.NotifyDelivered or queue.NotifyFailed, which end its delivery.
// Nothing is recorded when the job has left that end (a retry).
func (s *Store) NotificationTried(ctx context.Context, job uuid.UUID, endedAt time.Time, outcome string, next *time.Time, status int, why string) error {
	err := s.q.NotificationTried(ctx, db.NotificationTriedParams{JobID: job, FinalizedAt: endedAt, Outcome: outcome,
		NextAt: nullTime(next), HttpStatus: int32(status), Error: why})
	if err != nil {
		return fmt.Errorf("recording the notification of job %s: %w", job, err)
	}
	return nil
}

// NotificationSkipped marks job's end at endedAt as one its spec's
// notify.when does not name.
func (s *Store) NotificationSkipped(ctx context.Context, job uuid.UUID, endedAt time.Time) error {
	if err := s.q.NotificationSkipped(ctx, db.NotificationSkippedParams{JobID: job, FinalizedAt: endedAt}); err != nil {
		return fmt.Errorf("recording the notification of job %s: %w", job, err)
	}
	return nil
}

// LatestNotification returns the delivery of job's latest end that was
// tried; nil when none was.
func (s *Store) LatestNotification(ctx context.Context, job uuid.UUID) (*queue.Notification, error) {
	rows, err := s.q.NotificationLatest(ctx, job)
	if err != nil {
		return nil, fmt.Errorf("reading the notification of job %s: %w", job, err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	r := rows[0]
	return &queue.Notification{State: queue.JobState(r.State), EndedAt: r.FinalizedAt.UTC(), Outcome: r.Outcome, Tries: int(r.Tries),
		LastAt: timePtr(r.LastAt), NextAt: timePtr(r.NextAt), HTTPStatus: int(r.HttpStatus), Error: r.Error}, nil
}
