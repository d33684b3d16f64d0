package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/db"
)

// CreateToken records a token made by queue.NewTokenSecret.
func (s *Store) CreateToken(ctx context.Context, t *queue.Token) (*queue.Token, error) {
	var exp sql.NullTime
	if t.ExpiresAt != nil {
		exp = sql.NullTime{Time: *t.ExpiresAt, Valid: true}
	}
	row, err := s.q.TokenInsert(ctx, db.TokenInsertParams{ID: t.ID, Prefix: t.Prefix, Hash: t.Hash, Name: t.Name,
		Projects: t.Projects, Role: db.TokenRole(t.Role), ExpiresAt: exp})
	if err != nil {
		return nil, fmt.Errorf("recording token: %w", err)
	}
	return tokenFromRow(row), nil
}

// TokenByPrefix returns the token with the public prefix.
func (s *Store) TokenByPrefix(ctx context.Context, prefix string) (*queue.Token, error) {
	row, err := s.q.TokenGetByPrefix(ctx, prefix)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("token %s: %w", prefix, queue.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading token %s: %w", prefix, err)
	}
	return tokenFromRow(row), nil
}

// Tokens lists the tokens sharing a project with projects, or every token
// when projects is nil, newest first.
func (s *Store) Tokens(ctx context.Context, projects []string) ([]*queue.Token, error) {
	rows, err := s.q.TokenList(ctx, db.TokenListParams{Every: projects == nil, Projects: nonNil(projects)})
	if err != nil {
		return nil, fmt.Errorf("listing tokens: %w", err)
	}
	out := make([]*queue.Token, len(rows))
	for i, r := range rows {
		out[i] = tokenFromRow(r)
	}
	return out, nil
}

// RevokeToken revokes a token whose projects are all among projects (any
// token when projects is nil); queue.ErrNotFound when there is none.
func (s *Store) RevokeToken(ctx context.Context, id uuid.UUID, projects []string) error {
	n, err := s.q.TokenRevoke(ctx, db.TokenRevokeParams{ID: id, Every: projects == nil, Projects: nonNil(projects)})
	if err != nil {
		return fmt.Errorf("revoking token %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("token %s: %w", id, queue.ErrNotFound)
	}
	return nil
}

// TouchTokens records that the tokens were used at at.
func (s *Store) TouchTokens(ctx context.Context, ids []uuid.UUID, at time.Time) error {
	if err := s.q.TokenTouchMany(ctx, db.TokenTouchManyParams{Ids: ids, At: at}); err != nil {
		return fmt.Errorf("recording token use: %w", err)
	}
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func tokenFromRow(r db.Token) *queue.Token {
	return &queue.Token{ID: r.ID, Prefix: r.Prefix, Name: r.Name, Projects: r.Projects, Role: queue.Role(r.Role),
		CreatedAt: r.CreatedAt, ExpiresAt: timePtr(r.ExpiresAt), RevokedAt: timePtr(r.RevokedAt),
		LastUsedAt: timePtr(r.LastUsedAt), Hash: r.Hash}
}

// CountJobs counts the jobs of p's projects that a listing with p's
// filters would show (its cursor and limit aside), by state.
func (s *Store) CountJobs(ctx context.Context, p queue.Page) (queue.JobCounts, error) {
	a := listParams(p)
	rows, err := s.q.JobCountByState(ctx, db.JobCountByStateParams{Every: a.Every, Projects: a.Projects, State: a.State,
		LabelKey: a.LabelKey, LabelValue: a.LabelValue, Since: a.Since, Pool: a.Pool,
		RunsAfter: sql.NullString{String: p.RunsAfter.String(), Valid: p.RunsAfter != uuid.Nil}})
	if err != nil {
		return queue.JobCounts{}, fmt.Errorf("counting jobs: %w", err)
	}
	c := queue.NoJobs()
	for _, r := range rows {
		c.States[queue.JobState(r.State)] = r.Jobs
		c.Total += r.Jobs
	}
	return c, nil
}

// ListPage returns one page of jobs of p's projects, newest first.
func (s *Store) ListPage(ctx context.Context, p queue.Page) ([]*queue.Job, error) {
	if p.Limit <= 0 {
		p.Limit = 100
	}
	arg := listParams(p)
	var rows []db.JobRow
	var err error
	if p.RunsAfter == uuid.Nil {
		rows, err = s.q.JobListPage(ctx, arg)
	} else {
		rows, err = s.q.JobListRunsAfter(ctx, db.JobListRunsAfterParams{RunsAfter: p.RunsAfter.String(), Every: arg.Every, Projects: arg.Projects,
			State: arg.State, LabelKey: arg.LabelKey, LabelValue: arg.LabelValue, Since: arg.Since, Pool: arg.Pool, AfterAt: arg.AfterAt, AfterID: arg.AfterID, MaxRows: arg.MaxRows})
	}
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	out := make([]*queue.Job, 0, len(rows))
	for _, r := range rows {
		j, err := jobFromRow(r)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// listParams are p's filters, cursor and limit as the listing queries
// take them.
func listParams(p queue.Page) db.JobListPageParams {
	return db.JobListPageParams{
		Every:      slices.Contains(p.Projects, queue.AllProjects),
		Projects:   nonNil(p.Projects),
		State:      db.NullJobState{JobState: db.JobState(p.State), Valid: p.State != ""},
		LabelKey:   sql.NullString{String: p.LabelKey, Valid: p.LabelKey != ""},
		LabelValue: sql.NullString{String: p.LabelValue, Valid: p.LabelKey != ""},
		Since:      sql.NullTime{Time: p.Since, Valid: !p.Since.IsZero()},
		Pool:       sql.NullString{String: p.Pool, Valid: p.Pool != ""},
		AfterAt:    sql.NullTime{Time: p.AfterAt, Valid: !p.AfterAt.IsZero()},
		AfterID:    uuid.NullUUID{UUID: p.AfterID, Valid: !p.AfterAt.IsZero()},
		MaxRows:    int32(p.Limit),
	}
}
