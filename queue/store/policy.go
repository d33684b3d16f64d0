package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/db"
)

// PolicyVersion returns the policy version in effect; queue.ErrNotFound
// when none was ever set.
func (s *Store) PolicyVersion(ctx context.Context) (*queue.PolicyVersion, error) {
	row, err := s.q.PolicyVersionLatest(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("policy version: %w", queue.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the policy: %w", err)
	}
	return policyFromRow(row), nil
}

// PolicyVersionNumber returns the number of the policy version in effect, 0
// when none was ever set.
func (s *Store) PolicyVersionNumber(ctx context.Context) (int64, error) {
	v, err := s.q.PolicyVersionCurrent(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the policy version: %w", err)
	}
	return v, nil
}

// SetPolicy records rules as the next policy version. With expected set,
// only when the version in effect is *expected (0: none yet); otherwise,
// and when another writer took the number, queue.ErrPolicyChanged.
func (s *Store) SetPolicy(ctx context.Context, rules json.RawMessage, setBy, comment string, expected *int64) (*queue.PolicyVersion, error) {
	p := db.PolicyVersionInsertParams{Rules: rules, SetBy: setBy, Comment: comment}
	if expected != nil {
		p.OnlyIf, p.Expected = true, *expected
	}
	row, err := s.q.PolicyVersionInsert(ctx, p)
	if errors.Is(err, sql.ErrNoRows) || isUniqueViolation(err) {
		return nil, queue.ErrPolicyChanged
	}
	if err != nil {
		return nil, fmt.Errorf("recording the policy: %w", err)
	}
	return policyFromRow(row), nil
}

// PolicyVersions lists up to limit policy versions, newest first.
func (s *Store) PolicyVersions(ctx context.Context, limit int) ([]*queue.PolicyVersion, error) {
	rows, err := s.q.PolicyVersionList(ctx, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("listing policy versions: %w", err)
	}
	out := make([]*queue.PolicyVersion, len(rows))
	for i, r := range rows {
		out[i] = policyFromRow(r.PolicyVersion)
		out[i].SetByName = r.SetByName
	}
	return out, nil
}

func policyFromRow(r db.PolicyVersion) *queue.PolicyVersion {
	return &queue.PolicyVersion{Version: r.Version, Rules: r.Rules, SetBy: r.SetBy, SetAt: r.SetAt, Comment: r.Comment}
}
