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
// the job's project past its stored-bytes quota: the one an admin set for
// the project (SetProjectQuota), else the config file's.
func checkQuota(ctx context.Context, q *db.Queries, limits queue.Storage, id uuid.UUID, bytes int64) error {
	row, err := q.JobProjectQuota(ctx, id)
	if errors.Is(err, sql.ErrNoRows) {
		return queue.ErrFenced
	}
	if err != nil {
		return fmt.Errorf("reading job %s: %w", id, err)
	}
	quota, key := limits.QuotaOf(row.Project), "storage.project_quotas."+row.Project
	if row.QuotaBytes.Valid {
		quota, key = row.QuotaBytes.Int64, "PUT /v1/projects/"+row.Project+"/quota"
	}
	if quota == 0 {
		return nil
	}
	stored, err := q.ProjectStoredBytes(ctx, row.Project)
	if err != nil {
		return fmt.Errorf("summing the stored bytes of project %s: %w", row.Project, err)
	}
	if stored+bytes > quota {
		return fmt.Errorf("%w: project %s stores %d bytes of checkpoints and results; this checkpoint of %d bytes would pass its quota of %d bytes (%s): keep fewer or smaller checkpoints, or ask for a larger quota",
			queue.ErrQuotaExceeded, row.Project, stored, bytes, quota, key)
	}
	return nil
}

// ProjectQuota returns project's quota in effect and what it stores.
func (s *Store) ProjectQuota(ctx context.Context, project string) (*queue.ProjectQuota, error) {
	out := &queue.ProjectQuota{Project: project, Bytes: s.Storage.QuotaOf(project), Source: "config"}
	row, err := s.q.ProjectQuotaGet(ctx, project)
	switch {
	case err == nil:
		at := row.SetAt
		out.Bytes, out.Source, out.SetBy, out.SetAt = row.StoredBytes, "admin", row.SetBy, &at
	case !errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Errorf("reading the quota of project %s: %w", project, err)
	}
	if out.Stored, err = s.StoredBytes(ctx, project); err != nil {
		return nil, err
	}
	return out, nil
}

// SetProjectQuota sets project's stored-bytes quota (0: none) in place of
// the config file's, for every server at once: the quota is checked in the
// transaction that records each checkpoint.
func (s *Store) SetProjectQuota(ctx context.Context, project string, bytes int64, setBy string) error {
	if bytes < 0 {
		return fmt.Errorf("quota_bytes: must not be negative, got %d", bytes)
	}
	if _, err := s.q.ProjectQuotaSet(ctx, db.ProjectQuotaSetParams{Project: project, StoredBytes: bytes, SetBy: setBy}); err != nil {
		return fmt.Errorf("setting the quota of project %s: %w", project, err)
	}
	return nil
}

// ClearProjectQuota removes the quota an admin set for project, so that the
// config file's holds again; queue.ErrNotFound when none was set.
func (s *Store) ClearProjectQuota(ctx context.Context, project string) error {
	n, err := s.q.ProjectQuotaDelete(ctx, project)
	if err != nil {
		return fmt.Errorf("clearing the quota of project %s: %w", project, err)
	}
	if n == 0 {
		return fmt.Errorf("quota of project %s: %w", project, queue.ErrNotFound)
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

// RecordedArchives reports which of uris a record still names: a
// checkpoint, a job's results, or a pruned archive not yet deleted. A URI
// that names no job's archive (queue.ArchiveJob) counts as recorded, so
// that nothing gpuq did not write is ever taken for an orphan.
func (s *Store) RecordedArchives(ctx context.Context, uris []string) (map[string]bool, error) {
	recorded := make(map[string]bool, len(uris))
	var ids []uuid.UUID
	var named []string
	for _, uri := range uris {
		id, ok := queue.ArchiveJob(uri)
		if !ok {
			recorded[uri] = true
			continue
		}
		ids, named = append(ids, id), append(named, uri)
	}
	if len(named) == 0 {
		return recorded, nil
	}
	rows, err := s.q.ArchivesRecorded(ctx, db.ArchivesRecordedParams{JobIds: ids, StoreUris: named})
	if err != nil {
		return nil, fmt.Errorf("looking up %d archives' records: %w", len(named), err)
	}
	for _, uri := range rows {
		recorded[uri] = true
	}
	return recorded, nil
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

// UnfinishedJobs counts the jobs not yet finished of every project in each
// unfinished state, 0 included.
func (s *Store) UnfinishedJobs(ctx context.Context) ([]queue.JobCount, error) {
	rows, err := s.q.JobCountUnfinished(ctx)
	if err != nil {
		return nil, fmt.Errorf("counting unfinished jobs: %w", err)
	}
	out := make([]queue.JobCount, len(rows))
	for i, r := range rows {
		out[i] = queue.JobCount{Project: r.Project, State: queue.JobState(r.State), Jobs: r.Jobs}
	}
	return out, nil
}
