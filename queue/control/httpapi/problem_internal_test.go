package httpapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/pgtest"
)

// unreachable takes the errors of PostgreSQL out of reach (refused, its
// connection ended by the server) for outages, and the errors of a request
// or of a statement for what they are.
func TestUnreachableTellsOutagesFromOtherErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, refused := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=5")
	url := pgtest.URL(t)
	victim, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close(ctx)
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := other.Exec(ctx, "SELECT pg_terminate_backend("+strconv.Itoa(int(victim.PgConn().PID()))+")"); err != nil {
		t.Fatal(err)
	}
	_, terminated := victim.Exec(ctx, "SELECT 1")
	_, syntax := other.Exec(ctx, "SELEC 1")
	_, missing := other.Exec(ctx, "SELECT * FROM no_such_table")
	for name, c := range map[string]struct {
		err  error
		want bool
	}{
		"connection refused":       {refused, true},
		"terminated by the server": {fmt.Errorf("reading job: %w", terminated), true},
		"syntax error":             {syntax, false},
		"missing table":            {missing, false},
		"not found":                {queue.ErrNotFound, false},
		"plain":                    {errors.New("something else"), false},
	} {
		if c.err == nil {
			t.Fatalf("%s: no error to classify", name)
		}
		if got := unreachable(c.err); got != c.want {
			t.Errorf("%s (%v): unreachable = %v, want %v", name, c.err, got, c.want)
		}
	}
}
