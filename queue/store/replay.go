package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/db"
)

// DefaultSnapshotRetention is how long the offer snapshots (and the
// recipes that replay on them) are kept by default: a placement older than
// that keeps its compact decision but can no longer be explained in full.
const DefaultSnapshotRetention = 30 * 24 * time.Hour

// snapshots remembers which offer snapshots this store has written, so
// that the megabytes of a snapshot are sent once, not with every batch of
// placements made from it, and prunes old ones at most once an hour.
type snapshots struct {
	mu       sync.Mutex
	known    map[string]bool
	prunedAt time.Time
}

// storeSnapshots stores the offer snapshots of placements not yet known
// to be stored, so that JobPlaceMany can record each placement's recipe
// beside it; a snapshot of a placement that does not take effect is pruned
// with the rest. It returns the snapshot ids it wrote, to be remembered
// once the transaction commits.
func (s *Store) storeSnapshots(ctx context.Context, q *db.Queries, placed []queue.PlacedJob) ([]string, error) {
	var written []string
	s.snaps.mu.Lock()
	known := s.snaps.known
	s.snaps.mu.Unlock()
	for _, p := range placed {
		r := p.Placement.Replay
		if r == nil || known[r.SnapshotID] || slices.Contains(written, r.SnapshotID) {
			continue
		}
		if err := q.OfferSnapshotInsert(ctx, db.OfferSnapshotInsertParams{ID: r.SnapshotID, Offers: r.Offers}); err != nil {
			return nil, fmt.Errorf("storing offer snapshot %s: %w", r.SnapshotID, err)
		}
		written = append(written, r.SnapshotID)
	}
	return written, nil
}

// rememberSnapshots marks snapshots as stored after their transaction
// committed, and prunes the snapshots past retention when an hour has
// passed since the last pruning.
func (s *Store) rememberSnapshots(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	s.snaps.mu.Lock()
	known := make(map[string]bool, len(s.snaps.known)+len(ids))
	for id := range s.snaps.known {
		known[id] = true
	}
	for _, id := range ids {
		known[id] = true
	}
	s.snaps.known = known
	prune := time.Since(s.snaps.prunedAt) > time.Hour
	if prune {
		s.snaps.prunedAt = time.Now()
		// Pruned snapshots are forgotten; one still in use is stored again.
		s.snaps.known = nil
	}
	s.snaps.mu.Unlock()
	if prune {
		s.PruneOfferSnapshots(ctx, time.Now().Add(-s.snapshotRetention())) //nolint:errcheck // retried an hour later
	}
}

func (s *Store) snapshotRetention() time.Duration {
	if s.SnapshotRetention > 0 {
		return s.SnapshotRetention
	}
	return DefaultSnapshotRetention
}

// PruneOfferSnapshots deletes the offer snapshots stored before a time,
// and with them the recipes that replay on them; it returns how many
// snapshots it deleted.
func (s *Store) PruneOfferSnapshots(ctx context.Context, before time.Time) (int64, error) {
	n, err := s.q.OfferSnapshotsPrune(ctx, before)
	if err != nil {
		return 0, fmt.Errorf("pruning offer snapshots: %w", err)
	}
	return n, nil
}

// DecisionReplay returns what placement version of job id was decided
// from; queue.ErrNotFound when it was not recorded or has been pruned.
func (s *Store) DecisionReplay(ctx context.Context, id uuid.UUID, version int) (*queue.DecisionReplay, error) {
	r, err := s.q.PlacementRecipeGet(ctx, db.PlacementRecipeGetParams{JobID: id, Version: int32(version)})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("what placement %d of job %s was decided from: %w", version, id, queue.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading what placement %d of job %s was decided from: %w", version, id, err)
	}
	return &queue.DecisionReplay{Offers: r.Offers, Recipe: r.Recipe}, nil
}
