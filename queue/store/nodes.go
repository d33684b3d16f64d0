package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/db"
)

// RecordCanary stores a canary run, counts it against its node, and returns
// the run's id (attempts that run after it refer to it) and the node.
func (s *Store) RecordCanary(ctx context.Context, r queue.CanaryRecord) (int64, *queue.Node, error) {
	var id int64
	var node *queue.Node
	err := s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
		row, err := q.NodeRecordCanary(ctx, db.NodeRecordCanaryParams{
			ID: r.NodeID, Pool: r.Pool, Host: r.Host, Ok: sql.NullBool{Bool: r.OK, Valid: true},
			Summary: r.Summary, Quarantine: r.Quarantine, Reason: r.Reason,
		})
		if err != nil {
			return nil, fmt.Errorf("recording canary of node %s: %w", r.NodeID, err)
		}
		node = nodeFromRow(row)
		report := r.Report
		if len(report) == 0 {
			report = []byte("{}")
		}
		id, err = q.CanaryRunInsert(ctx, db.CanaryRunInsertParams{NodeID: r.NodeID, Ok: r.OK, Report: report})
		return nil, err
	})
	return id, node, err
}

// Node returns one node's record.
func (s *Store) Node(ctx context.Context, id string) (*queue.Node, error) {
	row, err := s.q.NodeGet(ctx, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("node %s: %w", id, queue.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return nodeFromRow(row), nil
}

// Nodes lists nodes, of one pool when pool is not empty.
func (s *Store) Nodes(ctx context.Context, pool string) ([]*queue.Node, error) {
	rows, err := s.q.NodeList(ctx, sql.NullString{String: pool, Valid: pool != ""})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	out := make([]*queue.Node, len(rows))
	for i, r := range rows {
		out[i] = nodeFromRow(r)
	}
	return out, nil
}

func nodeFromRow(r db.Node) *queue.Node {
	n := &queue.Node{ID: r.ID, Pool: r.Pool, Host: r.Host, FirstSeenAt: r.FirstSeenAt, LastCanaryAt: timePtr(r.LastCanaryAt),
		LastCanarySummary: r.LastCanarySummary, CanaryRuns: int(r.CanaryRuns), CanaryFailures: int(r.CanaryFailures),
		ConsecutiveFailures: int(r.ConsecutiveFailures), QuarantinedAt: timePtr(r.QuarantinedAt), QuarantineReason: r.QuarantineReason}
	if r.LastCanaryOk.Valid {
		ok := r.LastCanaryOk.Bool
		n.LastCanaryOK = &ok
	}
	return n
}
