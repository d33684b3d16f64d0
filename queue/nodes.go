package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gpuq/gpuq/sql/db"
)

// Node is a machine workers run on, with its canary record.
type Node struct {
	ID                  string     `json:"id"`
	Pool                string     `json:"pool"`
	Host                string     `json:"host"`
	FirstSeenAt         time.Time  `json:"first_seen_at"`
	LastCanaryAt        *time.Time `json:"last_canary_at,omitempty"`
	LastCanaryOK        *bool      `json:"last_canary_ok,omitempty"`
	LastCanarySummary   string     `json:"last_canary_summary,omitempty"`
	CanaryRuns          int        `json:"canary_runs"`
	CanaryFailures      int        `json:"canary_failures"`
	ConsecutiveFailures int        `json:"consecutive_failures"`
	QuarantinedAt       *time.Time `json:"quarantined_at,omitempty"`
	QuarantineReason    string     `json:"quarantine_reason,omitempty"`
}

// FailureRate is the share of the node's canaries that failed.
func (n *Node) FailureRate() float64 {
	if n.CanaryRuns == 0 {
		return 0
	}
	return float64(n.CanaryFailures) / float64(n.CanaryRuns)
}

// CanaryRecord is one canary run to record.
type CanaryRecord struct {
	NodeID  string
	Pool    string
	Host    string
	OK      bool
	Summary string
	// Report is the canary's full JSON report.
	Report []byte
	// Quarantine marks the node quarantined with Reason.
	Quarantine bool
	Reason     string
}

// RecordCanary stores a canary run, counts it against its node, and returns
// the run's id (attempts that run after it refer to it) and the node.
func (s *Store) RecordCanary(ctx context.Context, r CanaryRecord) (int64, *Node, error) {
	var id int64
	var node *Node
	err := s.inTx(ctx, func(q *db.Queries) ([]Event, error) {
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
func (s *Store) Node(ctx context.Context, id string) (*Node, error) {
	row, err := s.q.NodeGet(ctx, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("node %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return nodeFromRow(row), nil
}

// Nodes lists nodes, of one pool when pool is not empty.
func (s *Store) Nodes(ctx context.Context, pool string) ([]*Node, error) {
	rows, err := s.q.NodeList(ctx, sql.NullString{String: pool, Valid: pool != ""})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	out := make([]*Node, len(rows))
	for i, r := range rows {
		out[i] = nodeFromRow(r)
	}
	return out, nil
}

func nodeFromRow(r db.Node) *Node {
	n := &Node{ID: r.ID, Pool: r.Pool, Host: r.Host, FirstSeenAt: r.FirstSeenAt, LastCanaryAt: timePtr(r.LastCanaryAt),
		LastCanarySummary: r.LastCanarySummary, CanaryRuns: int(r.CanaryRuns), CanaryFailures: int(r.CanaryFailures),
		ConsecutiveFailures: int(r.ConsecutiveFailures), QuarantinedAt: timePtr(r.QuarantinedAt), QuarantineReason: r.QuarantineReason}
	if r.LastCanaryOk.Valid {
		ok := r.LastCanaryOk.Bool
		n.LastCanaryOK = &ok
	}
	return n
}
