package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// noopArgs is River's no-op job.
type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// riverInsertBatch is how many jobs one InsertMany call inserts: River's
// bulk path, one round trip per batch.
const riverInsertBatch = 1000

// measureRiver inserts n no-op jobs into River (on a fresh database of the
// same cluster, with River's default client settings apart from MaxWorkers
// and, when not zero, FetchCooldown) while its client works them, and times
// until every job is recorded as completed.
func (s *stack) measureRiver(ctx context.Context, n, maxWorkers, maxConns int, fetchCooldown time.Duration) (e2eResult, error) {
	url, err := s.freshDB(ctx, "river", false)
	if err != nil {
		return e2eResult{}, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return e2eResult{}, err
	}
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return e2eResult{}, err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return e2eResult{}, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return e2eResult{}, fmt.Errorf("migrating River: %w", err)
	}
	w := river.NewWorkers()
	river.AddWorker(w, noopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:       w,
		Logger:        quiet,
		FetchCooldown: fetchCooldown,
	})
	if err != nil {
		return e2eResult{}, err
	}
	if err := client.Start(ctx); err != nil {
		return e2eResult{}, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		client.Stop(stopCtx) //nolint:errcheck // measured already
	}()
	// Completions are heard from River's own event subscription, as
	// gpuq's are from its job events; River's table is asked once a second
	// as well and decides the result.
	events, cancelEvents := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancelEvents()
	start := time.Now()
	batch := make([]river.InsertManyParams, 0, riverInsertBatch)
	for i := range n {
		batch = append(batch, river.InsertManyParams{Args: noopArgs{}})
		if len(batch) == riverInsertBatch || i == n-1 {
			if _, err := client.InsertMany(ctx, batch); err != nil {
				return e2eResult{}, fmt.Errorf("inserting River jobs: %w", err)
			}
			batch = batch[:0]
		}
	}
	completed, lastAsked := 0, time.Now()
	err = poll(ctx, 5*time.Millisecond, time.Duration(n)*20*time.Millisecond+time.Minute, "every River job to complete", func() (bool, error) {
		for drained := false; !drained; {
			select {
			case <-events:
				completed++
			default:
				drained = true
			}
		}
		if completed >= n {
			return true, nil
		}
		if time.Since(lastAsked) < time.Second {
			return false, nil
		}
		lastAsked = time.Now()
		var done int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done)
		return done == n, err
	})
	elapsed := time.Since(start)
	if err != nil {
		return e2eResult{}, err
	}
	var done int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done); err != nil {
		return e2eResult{}, err
	}
	if done != n {
		return e2eResult{}, fmt.Errorf("want %d completed River jobs, got %d", n, done)
	}
	return e2eResult{JobsPerSec: float64(n) / elapsed.Seconds(), Seconds: elapsed.Seconds()}, nil
}
