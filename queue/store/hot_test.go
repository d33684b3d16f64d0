package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/db"
	"github.com/gpuq/gpuq/sql/pgtest"
)

// recording keeps the text of every statement run through it.
type recording struct {
	db.DBTX
	queries []string
}

func (r *recording) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	r.record(query)
	return r.DBTX.QueryContext(ctx, query, args...)
}

func (r *recording) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	r.record(query)
	return r.DBTX.ExecContext(ctx, query, args...)
}

func (r *recording) record(query string) {
	if !slices.Contains(r.queries, query) {
		r.queries = append(r.queries, query)
	}
}

// openStore opens a store on a fresh migrated database, as Open opens one,
// closed when t ends.
func openStore(t *testing.T) *Store {
	t.Helper()
	st, err := Open(context.Background(), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// The job path's claim, success and heartbeat statements keep generic plans
// made once per connection, and a generic plan made on an empty database,
// as in the first minute of a new deployment, would otherwise scan whole
// tables for as long as the connection lives. Their connections' settings
// must make each plan the index lookups by job id that the statements are
// written for.
func TestHotStatementsPlanIndexLookupsByJobIDOnAnEmptyDatabase(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	rec := &recording{DBTX: st.hotDB}
	st.hot = db.New(pgxArgs{rec})
	claim := queue.ClaimRequest{JobID: uuid.New(), PlacementVersion: 1, ClaimID: uuid.New(), WorkerID: "w", Host: "h",
		Pool: "p", Lease: time.Minute}
	if _, err := st.ClaimMany(ctx, []queue.ClaimRequest{claim}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SucceedInPools(ctx, []queue.PoolAttemptRef{{AttemptRef: queue.AttemptRef{JobID: claim.JobID, Attempt: 1}, Pool: "p"}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Heartbeat(ctx, claim.JobID, 1, time.Minute); !errors.Is(err, queue.ErrFenced) {
		t.Fatalf("heartbeat of an unknown job: %v, want fenced", err)
	}
	if len(rec.queries) != 3 {
		t.Fatalf("want the claim, success and heartbeat statements to run on the job path's connections, got %d statements", len(rec.queries))
	}
	plans := func(conn *sql.Conn) (bad []string) {
		if _, err := conn.ExecContext(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
			t.Fatal(err)
		}
		for i, q := range rec.queries {
			name := fmt.Sprintf("hot_plan_%d", i)
			if _, err := conn.ExecContext(ctx, "PREPARE "+name+" AS "+q); err != nil {
				t.Fatalf("preparing %s: %v", firstLine(q), err)
			}
			nulls := strings.TrimSuffix(strings.Repeat("NULL,", params(q)), ",")
			var plan string
			if err := conn.QueryRowContext(ctx, "EXPLAIN (FORMAT JSON) EXECUTE "+name+"("+nulls+")").Scan(&plan); err != nil {
				t.Fatalf("explaining %s: %v", firstLine(q), err)
			}
			if _, err := conn.ExecContext(ctx, "DEALLOCATE "+name); err != nil {
				t.Fatal(err)
			}
			for _, b := range notByJobID(t, plan) {
				bad = append(bad, firstLine(q)+": "+b)
			}
		}
		return bad
	}
	hot, err := st.hotDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hot.Close()
	if bad := plans(hot); len(bad) > 0 {
		t.Errorf("the job path's generic plans on an empty database read otherwise than by job id:\n%s", strings.Join(bad, "\n"))
	}
	// The same generic plans made with PostgreSQL's default settings scan
	// the empty tables: the connections' settings are what prevent it.
	plain, err := st.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if bad := plans(plain); len(bad) == 0 {
		t.Error("with the default planner settings the generic plans also read by job id only; this test no longer shows what the job path's settings prevent")
	}
}

func firstLine(q string) string { return strings.SplitN(strings.TrimSpace(q), "\n", 2)[0] }

var paramRef = regexp.MustCompile(`\$(\d+)`)

// params is the number of parameters of a statement.
func params(q string) int {
	n := 0
	for _, m := range paramRef.FindAllStringSubmatch(q, -1) {
		k, _ := strconv.Atoi(m[1]) // digits only
		n = max(n, k)
	}
	return n
}

// notByJobID lists the nodes of a JSON plan that read a table otherwise
// than by an index lookup on a job id: sequential scans, hash and merge
// joins, and index scans whose condition names no job id.
func notByJobID(t *testing.T, plan string) []string {
	t.Helper()
	var bad []string
	for _, node := range pgtest.PlanNodes(t, plan) {
		switch node.Type {
		case "Seq Scan", "Hash Join", "Merge Join", "Bitmap Heap Scan":
			bad = append(bad, node.Type+" "+node.Relation)
		case "Index Scan", "Index Only Scan":
			if !strings.Contains(node.Cond, "id = ") {
				bad = append(bad, node.Type+" using "+node.Index+" on "+node.Cond)
			}
		}
	}
	return bad
}

// The scheduler's insert of placed jobs stays prepared on its connection
// and, from the sixth call on, runs its generic plan without planning.
func TestInsertOfPlacedJobsIsPreparedOncePerConnection(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	st.DB.SetMaxOpenConns(1)
	spec, err := queue.ParseSpec([]byte("project: vision\ncommand: [/bin/true]"))
	if err != nil {
		t.Fatal(err)
	}
	const calls = 8
	for range calls {
		id := uuid.New()
		_, placed, err := st.RecordAndPlace(ctx, []queue.NewJob{{ID: id, Spec: spec}}, queue.Decided{Placed: []queue.PlacedJob{
			{JobID: id, Placement: queue.Placement{Version: 1, Pool: "p", Region: "r"}}}})
		if err != nil || len(placed) != 1 {
			t.Fatalf("placed %v, %v", placed, err)
		}
	}
	var prepared, generic, custom int
	err = st.DB.QueryRowContext(ctx, `SELECT count(*), COALESCE(sum(generic_plans), 0), COALESCE(sum(custom_plans), 0)
		FROM pg_prepared_statements WHERE statement LIKE '-- name: JobInsertPlacedMany %'`).Scan(&prepared, &generic, &custom)
	if err != nil {
		t.Fatal(err)
	}
	if prepared != 1 || generic+custom != calls || generic == 0 {
		t.Fatalf("JobInsertPlacedMany: %d statements prepared on the connection, %d generic and %d custom plans of %d calls; want 1, and generic plans", prepared, generic, custom, calls)
	}
}
