package db

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/sql/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// explaining runs every query through EXPLAIN first and keeps its plan, then
// runs it.
type explaining struct {
	DBTX
	t     *testing.T
	plans []string
}

func (e *explaining) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	e.explain(ctx, query, args)
	return e.DBTX.QueryContext(ctx, query, args...)
}

func (e *explaining) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	e.explain(ctx, query, args)
	return e.DBTX.ExecContext(ctx, query, args...)
}

func (e *explaining) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	e.explain(ctx, query, args)
	return e.DBTX.QueryRowContext(ctx, query, args...)
}

func (e *explaining) explain(ctx context.Context, query string, args []any) {
	var plan string
	if err := e.DBTX.QueryRowContext(ctx, "EXPLAIN (FORMAT JSON) "+query, args...).Scan(&plan); err != nil {
		e.t.Fatalf("explaining %s: %v", firstLine(query), err)
	}
	e.plans = append(e.plans, plan)
}

func firstLine(q string) string { return strings.SplitN(strings.TrimSpace(q), "\n", 2)[0] }

// jobsScans returns how plan reads the jobs table other than by its primary
// key: sequential scans and scans of its other indexes.
func jobsScans(t *testing.T, plan string, otherIndexes map[string]bool) []string {
	t.Helper()
	var bad []string
	for _, node := range pgtest.PlanNodes(t, plan) {
		if node.Relation == "jobs" && node.Type == "Seq Scan" || otherIndexes[node.Index] {
			on := node.Relation
			if node.Index != "" {
				on = node.Index
			}
			bad = append(bad, node.Type+" on "+on)
		}
	}
	return bad
}

// TestWritesLookJobsUpByID holds every statement that writes a batch of
// jobs, or one job an attempt holds or that waits, to finding them through
// the primary key. The table's statistics are taken while it holds a few
// pending jobs, and then thousands of jobs are queued: the planner believes
// almost no job is placed or running, and a scan of jobs_state_updated looks
// cheapest, but it visits every queued job (and every index entry the
// queue's churn left since the last vacuum) for each batch or lease renewal,
// so that its cost grows with the queue.
func TestWritesLookJobsUpByID(t *testing.T) {
	ctx := context.Background()
	conn := pgtest.DB(t)
	must := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", firstLine(q), err)
		}
	}
	must(`INSERT INTO projects (name) VALUES ('p')`)
	must(`INSERT INTO jobs (id, project, name, spec) SELECT gen_random_uuid(), 'p', 'j', '{}' FROM generate_series(1, 60)`)
	must(`ANALYZE jobs`)
	const queued = 5000
	must(`INSERT INTO jobs (id, project, name, spec, state, placement_version, pool)
	      SELECT gen_random_uuid(), 'p', 'j', '{}', 'placed', 1, 'gpu' FROM generate_series(1, $1::int)`, queued)
	must(`INSERT INTO placements (job_id, version, pool, region, residency, countries, price_micros, currency, decision, estimate_micros, estimate_currency, provider)
	      SELECT id, 1, 'gpu', 'r', 'EU', '{DE}', 0, 'EUR', '{}', 0, 'EUR', 'local' FROM jobs WHERE state = 'placed'`)
	otherIndexes := map[string]bool{}
	rows, err := conn.QueryContext(ctx, `SELECT indexname FROM pg_indexes WHERE tablename = 'jobs' AND indexname <> 'jobs_pkey'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		otherIndexes[name] = true
	}
	if rows.Close(); !otherIndexes["jobs_state_updated"] {
		t.Fatalf("jobs' other indexes are %v, without jobs_state_updated", otherIndexes)
	}
	placed := func(n int) []uuid.UUID {
		t.Helper()
		rows, err := conn.QueryContext(ctx, `SELECT id FROM jobs WHERE state = 'placed' AND placement_version = 1 ORDER BY id LIMIT $1`, n)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var ids []uuid.UUID
		for rows.Next() {
			var id uuid.UUID
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	const batch = 50
	claim := func(ids []uuid.UUID) JobClaimManyParams {
		p := JobClaimManyParams{LeaseSeconds: []float64{60}, Ids: ids, Countries: []string{"DE"}, Pools: []string{"gpu"},
			WorkerIds: []string{"w"}, Hosts: []string{"h"}, Pids: []int32{1}, NodeIds: []string{""}, CanaryRunIds: []int64{0},
			Messages: []string{"running"}}
		for range ids {
			p.PlacementVersions, p.ClaimIds = append(p.PlacementVersions, 1), append(p.ClaimIds, uuid.New())
			p.Claimants = append(p.Claimants, 1)
		}
		return p
	}
	ones := func(n int, pool string) ([]int32, []string) {
		a, p := make([]int32, n), make([]string, n)
		for i := range a {
			a[i], p[i] = 1, pool
		}
		return a, p
	}
	// check runs a statement through EXPLAIN, wanting it to write want
	// jobs and to find them by id alone.
	check := func(name string, want int, run func(q *Queries) (int, error)) {
		t.Helper()
		e := &explaining{DBTX: conn, t: t}
		n, err := run(New(e))
		if err != nil || n != want {
			t.Fatalf("%s wrote %d jobs (%v), want %d", name, n, err, want)
		}
		for _, plan := range e.plans {
			if bad := jobsScans(t, plan, otherIndexes); len(bad) > 0 {
				t.Errorf("%s reads jobs through %s, not by id alone: its cost grows with the %d jobs queued\n%s", name, strings.Join(bad, ", "), queued, plan)
			}
		}
	}
	// count adapts a single-job statement's count of rows to check.
	count := func(n int64, err error) (int, error) { return int(n), err }

	won := placed(batch)
	check("JobClaimMany", batch, func(q *Queries) (int, error) {
		rows, err := q.JobClaimMany(ctx, claim(won))
		return len(rows), err
	})
	check("JobSucceedMany", batch, func(q *Queries) (int, error) {
		attempts, pools := ones(batch, "gpu")
		ids, err := q.JobSucceedMany(ctx, JobSucceedManyParams{Ids: won, Attempts: attempts, Pools: pools})
		return len(ids), err
	})
	lost := placed(batch)
	if rows, err := New(conn).JobClaimMany(ctx, claim(lost)); err != nil || len(rows) != batch {
		t.Fatalf("claiming the jobs a worker then loses: %d, %v", len(rows), err)
	}
	check("JobFenceLost", batch, func(q *Queries) (int, error) {
		attempts, _ := ones(batch, "")
		rows, err := q.JobFenceLost(ctx, JobFenceLostParams{Ids: lost, Attempts: attempts, WorkerID: "w", Pool: "gpu", Reason: "worker lost"})
		return len(rows), err
	})
	check("JobPlaceMany", batch, func(q *Queries) (int, error) {
		ids := placed(batch)
		p := JobPlaceManyParams{JobIds: ids}
		for range ids {
			p.Versions = append(p.Versions, 2)
			p.Pools, p.Regions, p.Residencies, p.Countries = append(p.Pools, "gpu"), append(p.Regions, "r"), append(p.Residencies, "EU"), append(p.Countries, "DE")
			p.PriceMicros, p.Currencies, p.Decisions = append(p.PriceMicros, 0), append(p.Currencies, "EUR"), append(p.Decisions, "{}")
			p.EstimateMicros, p.EstimateCurrencies, p.Providers = append(p.EstimateMicros, 0), append(p.EstimateCurrencies, "EUR"), append(p.Providers, "local")
			p.Snapshots, p.Recipes = append(p.Snapshots, ""), append(p.Recipes, "{}")
		}
		placed, err := q.JobPlaceMany(ctx, p)
		return len(placed), err
	})

	// One job at a time: the writes an attempt makes, and those that settle
	// a waiting job.
	held := placed(4)
	heldClaim := claim(held)
	if rows, err := New(conn).JobClaimMany(ctx, heldClaim); err != nil || len(rows) != len(held) {
		t.Fatalf("claiming jobs: %d, %v", len(rows), err)
	}
	check("JobHeartbeat", 1, func(q *Queries) (int, error) {
		return count(q.JobHeartbeat(ctx, JobHeartbeatParams{ID: held[0], Attempt: 1, LeaseSeconds: 60}))
	})
	check("CheckpointInsert", 1, func(q *Queries) (int, error) {
		seq, err := q.CheckpointInsert(ctx, CheckpointInsertParams{JobID: held[0], Attempt: 1, Bytes: 1, Sha256: "00", Region: "r", StoreUri: "mem://c/1"})
		return int(seq), err
	})
	check("ResultInsert", 1, func(q *Queries) (int, error) {
		return count(q.ResultInsert(ctx, ResultInsertParams{JobID: held[0], Attempt: 1, Bytes: 1, Sha256: "00", Region: "r", StoreUri: "mem://r/1"}))
	})
	check("JobGetByClaim", 1, func(q *Queries) (int, error) {
		_, err := q.JobGetByClaim(ctx, JobGetByClaimParams{ID: held[0], ClaimID: uuid.NullUUID{UUID: heldClaim.ClaimIds[0], Valid: true}})
		return 1, err
	})
	check("JobFail", 1, func(q *Queries) (int, error) {
		return count(q.JobFail(ctx, JobFailParams{ID: held[0], Attempt: 1, Reason: "exit 1"}))
	})
	check("JobRequeue", 1, func(q *Queries) (int, error) {
		return count(q.JobRequeue(ctx, JobRequeueParams{ID: held[1], Attempt: 1, Reason: "notice"}))
	})
	check("JobMarkDead", 1, func(q *Queries) (int, error) {
		return count(q.JobMarkDead(ctx, JobMarkDeadParams{ID: held[2], Attempt: 1, Reason: "dead"}))
	})
	check("JobCancel", 1, func(q *Queries) (int, error) {
		_, err := q.JobCancel(ctx, JobCancelParams{ID: held[3], Reason: "cancelled"})
		return 1, err
	})
	waiting := placed(1)[0]
	check("JobRefuseClaim", 1, func(q *Queries) (int, error) {
		return count(q.JobRefuseClaim(ctx, JobRefuseClaimParams{ID: waiting, PlacementVersion: 1}))
	})
	var pending uuid.UUID
	if err := conn.QueryRowContext(ctx, `SELECT id FROM jobs WHERE state = 'pending' LIMIT 1`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	check("JobReject", 1, func(q *Queries) (int, error) {
		return count(q.JobReject(ctx, JobRejectParams{ID: pending, Reason: "over budget"}))
	})
}
