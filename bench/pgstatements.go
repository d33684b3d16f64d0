package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// stmtCost is what one PostgreSQL statement cost a run, per job.
type stmtCost struct {
	Name   string  `json:"name"`
	Calls  int64   `json:"calls"`
	Rows   int64   `json:"rows"`
	ExecUS float64 `json:"exec_us_per_job"`
	PlanUS float64 `json:"plan_us_per_job"`
}

// sqlcName finds the name sqlc gives a statement in its text.
var sqlcName = regexp.MustCompile(`-- name: (\w+)`)

// resetStatements forgets what every statement has cost so far.
func (s *stack) resetStatements(ctx context.Context) error {
	admin, err := sql.Open("postgres", s.pg.URL())
	if err != nil {
		return err
	}
	defer admin.Close()
	_, err = admin.ExecContext(ctx, "SELECT pg_stat_statements_reset()")
	return err
}

// statementCosts reads what each statement run in the database of dbURL
// since resetStatements cost, per job of n, most costly first: execution
// and planning time (wall time, waits included), by sqlc's name for the
// statement or its first words.
func (s *stack) statementCosts(ctx context.Context, dbURL string, n int) ([]stmtCost, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, err
	}
	admin, err := sql.Open("postgres", s.pg.URL())
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	rows, err := admin.QueryContext(ctx, `SELECT query, calls, rows, total_exec_time, total_plan_time
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)`, strings.TrimPrefix(u.Path, "/"))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byName := map[string]*stmtCost{}
	for rows.Next() {
		var query string
		var calls, nrows int64
		var execMS, planMS float64
		if err := rows.Scan(&query, &calls, &nrows, &execMS, &planMS); err != nil {
			return nil, err
		}
		name := strings.Join(strings.Fields(query), " ")
		if m := sqlcName.FindStringSubmatch(query); m != nil {
			name = m[1]
		} else if r := []rune(name); len(r) > 40 {
			name = string(r[:40]) + "…"
		}
		c := byName[name]
		if c == nil {
			c = &stmtCost{Name: name}
			byName[name] = c
		}
		c.Calls += calls
		c.Rows += nrows
		c.ExecUS += execMS * 1000 / float64(n)
		c.PlanUS += planMS * 1000 / float64(n)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []stmtCost
	for _, c := range byName {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b stmtCost) int {
		switch ta, tb := a.ExecUS+a.PlanUS, b.ExecUS+b.PlanUS; {
		case ta > tb:
			return -1
		case ta < tb:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// String is the statement's line in the table's note.
func (c stmtCost) String() string {
	perCall := float64(c.Rows) / float64(max(c.Calls, 1))
	return fmt.Sprintf("%d calls, %.0f rows a call; planning %.1f µs of it (execution and planning, waits included)", c.Calls, perCall, c.PlanUS)
}
