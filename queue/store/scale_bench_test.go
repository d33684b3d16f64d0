package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// BenchmarkAttemptsWithJobsQueued runs attempts through their life (a
// worker's claim of 32 jobs, a heartbeat each, their successes) while 3,200
// or 100,000 jobs wait in the same pool. The table's statistics are taken
// while it held a few pending jobs, as after a deployment's first hour
// before a large sweep arrives, so that the planner believes almost no job
// is placed or running. An op is one batch of 32; jobs/s is per connection.
// With nothing that grows with the queue, both run at the same rate.
func BenchmarkAttemptsWithJobsQueued(b *testing.B) {
	for _, queued := range []int{3_200, 100_000} {
		b.Run(fmt.Sprintf("queued=%d", queued), func(b *testing.B) { benchmarkAttempts(b, queued) })
	}
}

func benchmarkAttempts(b *testing.B, queued int) {
	const batch = 32
	ctx := context.Background()
	s, _ := queuetest.Store(b, nil)
	for _, q := range []string{
		`INSERT INTO projects (name) VALUES ('default') ON CONFLICT DO NOTHING`,
		`INSERT INTO jobs (id, project, name, spec) SELECT gen_random_uuid(), 'default', 'j', '{}' FROM generate_series(1, 60)`,
		`ANALYZE jobs`,
		fmt.Sprintf(`INSERT INTO jobs (id, project, name, spec, state, placement_version, pool)
		 SELECT gen_random_uuid(), 'default', 'j', '{"command": ["/bin/true"]}', 'placed', 1, 'gpu' FROM generate_series(1, %d)`, queued),
		`INSERT INTO placements (job_id, version, pool, region, residency, countries, price_micros, currency, decision, estimate_micros, estimate_currency, provider)
		 SELECT id, 1, 'gpu', 'eu-central-1', 'EU', '{DE}', 0, 'EUR', '{}', 0, 'EUR', 'local' FROM jobs WHERE state = 'placed'`,
	} {
		if _, err := s.DB.ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	rows, err := s.DB.QueryContext(ctx, `SELECT id FROM jobs WHERE state = 'placed' ORDER BY id`)
	if err != nil {
		b.Fatal(err)
	}
	var ids []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
	}
	if rows.Close(); len(ids) != queued {
		b.Fatalf("%d jobs queued, want %d", len(ids), queued)
	}
	if b.N*batch > queued {
		b.Fatalf("%d batches of %d need more than the %d jobs queued", b.N, batch, queued)
	}
	b.ResetTimer()
	for i := range b.N {
		reqs := make([]queue.ClaimRequest, batch)
		refs := make([]queue.AttemptRef, batch)
		for j := range reqs {
			id := ids[i*batch+j]
			reqs[j] = queue.ClaimRequest{JobID: id, PlacementVersion: 1, ClaimID: uuid.New(), Lease: time.Minute,
				WorkerID: "w", Host: "h", PID: 1, Pool: "gpu", Country: "DE"}
			refs[j] = queue.AttemptRef{JobID: id, Attempt: 1}
		}
		results, err := s.ClaimMany(ctx, reqs)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range results {
			if r.Err != nil {
				b.Fatalf("claiming: %v", r.Err)
			}
			if err := s.Heartbeat(ctx, r.Claimed.Job.ID, r.Claimed.Job.Attempt, time.Minute); err != nil {
				b.Fatalf("heartbeat: %v", err)
			}
		}
		recorded, err := s.SucceedMany(ctx, refs)
		if err != nil {
			b.Fatal(err)
		}
		for _, ok := range recorded {
			if !ok {
				b.Fatal("a success was not recorded")
			}
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
}
