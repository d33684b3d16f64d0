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

// checkQuota refuses an archive of size bytes for job id when it would take
// the job's project past its stored-bytes quota.
func checkQuota(ctx context.Context, q *db.Queries, limits queue.Storage, id uuid.UUID, bytes int64) error {
	if limits.ProjectQuotaBytes == 0 && len(limits.ProjectQuotas) == 0 {
		return nil
	}
	job, err := q.JobGetByID(ctx, id)
	if errors.Is(err, sql.ErrNoRows) {
		return queue.ErrFenced
	}
	if err != nil {
		return fmt.Errorf("reading job %s: %w", id, err)
	}
	quota := limits.QuotaOf(job.Project)
	if quota == 0 {
		return nil
	}
	stored, err := q.ProjectStoredBytes(ctx, job.Project)
	if err != nil {
		return fmt.Errorf("summing the stored bytes of project %s: %w", job.Project, err)
	}
	if stored+bytes > quota {
		return fmt.Errorf("%w: project %s stores %d bytes of checkpoints and results; this checkpoint of %d bytes would pass its quota of %d bytes (storage.project_quotas.%s): keep fewer or smaller checkpoints, or ask for a larger quota",
			queue.ErrQuotaExceeded, job.Project, stored, bytes, quota, job.Project)
	}
	return nil
}

// StoredBytes is what a project keeps in the archive stores: its recorded
// checkpoints and results, and pruned archives not yet deleted.
func (s *Store) StoredBytes(ctx context.Context, project string) (int64, error) {
	n, err := s.q.ProjectStoredBytes(ctx, project)
	if err != nil {
		return 0, fmt.Errorf("summing the stored bytes of project %s: %w", project, err)
	}
	return n, nil
}

// PruneCheckpoints removes from the record every checkpoint older than its
// job's latest Storage.KeepCheckpoints and every checkpoint of a job that
// finished more than Storage.CheckpointRetention before now, and queues
// their archives for deletion (Garbage). It returns how many it removed.
func (s *Store) PruneCheckpoints(ctx context.Context, now time.Time) (int64, error) {
	limits := s.Storage.WithDefaults()
	n, err := s.q.CheckpointPrune(ctx, db.CheckpointPruneParams{Keep: int32(limits.KeepCheckpoints), FinishedBefore: now.Add(-limits.CheckpointRetention)})
	if err != nil {
		return 0, fmt.Errorf("pruning checkpoints: %w", err)
	}
	return n, nil
}

// Garbage lists up to max archives of pruned checkpoints still to be
// deleted from their store, oldest first.
func (s *Store) Garbage(ctx context.Context, max int) ([]queue.Garbage, error) {
	rows, err := s.q.CheckpointGarbageList(ctx, int32(max))
	if err != nil {
		return nil, fmt.Errorf("listing pruned archives: %w", err)
	}
	out := make([]queue.Garbage, len(rows))
	for i, r := range rows {
		out[i] = queue.Garbage{StoreURI: r.StoreUri, JobID: r.JobID, Project: r.Project, Bytes: r.Bytes}
	}
	return out, nil
}

// ForgetGarbage drops archives deleted from their store from the list.
func (s *Store) ForgetGarbage(ctx context.Context, uris []string) error {
	if len(uris) == 0 {
		return nil
	}
	if err := s.q.CheckpointGarbageDelete(ctx, uris); err != nil {
		return fmt.Errorf("forgetting %d deleted archives: %w", len(uris), err)
	}
	return nil
}
