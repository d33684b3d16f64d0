package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
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

// riverSetup is one configuration of River's client and of how the jobs
// reach it.
type riverSetup struct {
	name, note    string
	maxWorkers    int
	fetchCooldown time.Duration // 0: River's default, 100 ms
	fetchPoll     time.Duration // 0: River's default, 1 s
	insertBatch   int           // jobs per InsertMany call: River's bulk path, one round trip each
	// preload inserts every job before the client starts and times from
	// its start, as River's own benchmark does with --num-total-jobs;
	// otherwise the jobs are inserted while the client works them, as
	// gpuq's are submitted.
	preload bool
}

// riverBenchMaxWorkers is MaxWorkers in River's own benchmark.
const riverBenchMaxWorkers = 2000

// riverSetups are the River variants the benchmark runs: River's defaults,
// its minimum FetchCooldown, and the settings of River's own benchmark
// (`river bench --num-total-jobs N`, cmd/river/riverbench in River's
// repository: MaxWorkers 2,000, FetchCooldown 2 ms, FetchPollInterval
// 20 ms, InsertMany batches of 5,000, every job inserted before the client
// starts), the fastest River configuration its authors publish.
func riverSetups(maxWorkers int) []riverSetup {
	return []riverSetup{
		{name: "end-to-end River, no-op, defaults", maxWorkers: maxWorkers, insertBatch: 1000,
			note: fmt.Sprintf("MaxWorkers %d, FetchCooldown 100ms (default), InsertMany ×1000 while it works", maxWorkers)},
		{name: "end-to-end River, no-op, FetchCooldown 1ms", maxWorkers: maxWorkers, fetchCooldown: time.Millisecond, insertBatch: 1000,
			note: fmt.Sprintf("MaxWorkers %d, FetchCooldown 1ms (minimum), InsertMany ×1000 while it works", maxWorkers)},
		{name: "end-to-end River, no-op, river bench settings", maxWorkers: riverBenchMaxWorkers, fetchCooldown: 2 * time.Millisecond,
			fetchPoll: 20 * time.Millisecond, insertBatch: 5000, preload: true,
			note: "MaxWorkers 2000, FetchCooldown 2ms, FetchPollInterval 20ms, InsertMany ×5000 before the client starts, timed from its start"},
	}
}

// measureRiver puts n no-op jobs through River as setup says (on a fresh
// database of the same cluster) and times until every job is recorded as
// completed.
func (s *stack) measureRiver(ctx context.Context, n, maxConns int, setup riverSetup) (e2eResult, error) {
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
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: setup.maxWorkers}},
		Workers:           w,
		Logger:            quiet,
		FetchCooldown:     setup.fetchCooldown,
		FetchPollInterval: setup.fetchPoll,
	})
	if err != nil {
		return e2eResult{}, err
	}
	// Completions are heard from River's own event subscription, as
	// gpuq's are from its job events; River's table is asked once a second
	// as well and decides the result.
	events, cancelEvents := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancelEvents()
	insert := func() error {
		batch := make([]river.InsertManyParams, 0, setup.insertBatch)
		for i := range n {
			batch = append(batch, river.InsertManyParams{Args: noopArgs{}})
			if len(batch) == setup.insertBatch || i == n-1 {
				if _, err := client.InsertMany(ctx, batch); err != nil {
					return fmt.Errorf("inserting River jobs: %w", err)
				}
				batch = batch[:0]
			}
		}
		return nil
	}
	if setup.preload {
		if err := insert(); err != nil {
			return e2eResult{}, err
		}
	}
	start, cpuStart := time.Now(), sampleCPU(s.pgData)
	if err := client.Start(ctx); err != nil {
		return e2eResult{}, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		client.Stop(stopCtx) //nolint:errcheck // measured already
	}()
	if !setup.preload {
		start, cpuStart = time.Now(), sampleCPU(s.pgData)
		if err := insert(); err != nil {
			return e2eResult{}, err
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
	elapsed, cpu := time.Since(start), cpuStart.perJob(sampleCPU(s.pgData), n)
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
	return e2eResult{JobsPerSec: float64(n) / elapsed.Seconds(), Seconds: elapsed.Seconds(), CPU: cpu}, nil
}

// riverBenchLine is the summary line `river bench` prints at its end, e.g.
// "bench: total jobs worked [ 100000 ], total jobs inserted [ 100000 ],
// overall job/sec [ 21630.4 ], running 4.62s".
var riverBenchLine = regexp.MustCompile(`overall job/sec \[\s*([0-9]+(?:\.[0-9]+)?)\s*\]`)

// parseRiverBench returns the overall jobs per second of `river bench`'s
// output.
func parseRiverBench(out []byte) (float64, error) {
	m := riverBenchLine.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		return 0, fmt.Errorf("no %q line in river bench's output", "overall job/sec")
	}
	return strconv.ParseFloat(string(m[len(m)-1][1]), 64)
}

// riverCLIFigure runs River's own benchmark, `river bench --num-total-jobs
// n`, on a fresh database of the same cluster, once River's CLI is
// installed (`go install github.com/riverqueue/river/cmd/river@latest`),
// and returns its overall jobs per second. ok is false when the CLI is not
// found.
func (s *stack) riverCLIFigure(ctx context.Context, cli string, n int) (perSec float64, ok bool, err error) {
	bin, err := exec.LookPath(cli)
	if err != nil {
		return 0, false, nil
	}
	url, err := s.freshDB(ctx, "riverbench", false)
	if err != nil {
		return 0, true, err
	}
	if out, err := exec.CommandContext(ctx, bin, "migrate-up", "--database-url", url).CombinedOutput(); err != nil {
		return 0, true, fmt.Errorf("river migrate-up: %w: %s", err, lastLines(out, 5))
	}
	out, err := exec.CommandContext(ctx, bin, "bench", "--database-url", url, "--num-total-jobs", strconv.Itoa(n)).CombinedOutput()
	if err != nil {
		return 0, true, fmt.Errorf("river bench: %w: %s", err, lastLines(out, 5))
	}
	perSec, err = parseRiverBench(out)
	return perSec, true, err
}

// lastLines is the last n lines of out, for an error.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
