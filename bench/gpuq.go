package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/workers"
)

// benchPool is the one pool every benchmark job is placed on.
var benchPool = local.PoolConfig{Pool: "bench", Region: "eu-bench-1", Country: "DE", Card: "cpu", VCPU: 64, MemoryGB: 256, Tier: "on-demand", PricePerHour: "0.10", Currency: "EUR"}

// quiet is the logger of the in-process scheduler and workers: per-job
// lines would measure the terminal, not the queue.
var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// plane is a gpuq control plane (scheduler and worker service) and
// in-process workers, each with its own NATS connection as separate
// processes would have; only the control plane opens PostgreSQL.
type plane struct {
	store   *store.Store // the scheduler's; used to read results
	cancel  context.CancelCauseFunc
	wg      sync.WaitGroup
	closers []func()
}

// startPlane starts a control plane offering pools and nWorkers workers of
// the first pool.
func (s *stack) startPlane(ctx context.Context, dbURL string, pools []local.PoolConfig, nWorkers, slots int, ackWait time.Duration) (*plane, error) {
	p := &plane{}
	ctx, p.cancel = context.WithCancelCause(ctx)
	open := func() (*nats.Conn, jetstream.JetStream, *store.Store, error) {
		nc, js, err := s.connect()
		if err != nil {
			return nil, nil, nil, err
		}
		st, err := store.Open(ctx, dbURL)
		if err != nil {
			nc.Close()
			return nil, nil, nil, err
		}
		st.Events = &queue.EventPublisher{NATS: nc, Logger: quiet}
		p.closers = append(p.closers, func() { st.Close(); nc.Close() })
		return nc, js, st, nil
	}
	planeNC, js, store, err := open()
	if err != nil {
		return nil, err
	}
	p.store = store
	provider, err := local.New(pools)
	if err != nil {
		p.Stop()
		return nil, err
	}
	// The loops `gpuq server` runs: the scheduler, the reconciler, the
	// replacer and the liveness monitor that hands a silent worker's jobs
	// back; as in `gpuq server`, it hears of the worker service's claims,
	// and both keep the metrics up to date.
	claims, live := &control.RecentClaims{}, &control.LiveWorkers{}
	metrics := control.NewMetrics(store, js, live, quiet)
	cp := &control.Plane{JS: js, Store: store, Placer: &control.PolicyPlacer{Sources: []adapters.OfferSource{provider}}, NATS: planeNC, Claims: claims,
		Workers: live, Logger: quiet}
	errc := cp.Start(ctx)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for range control.PlaneLoops {
			if err := <-errc; err != nil && ctx.Err() == nil {
				quiet.Error("control plane loop stopped", "err", err)
			}
		}
	}()
	// The control plane serves the worker service on its own connection;
	// workers reach the system of record only through it, as worker
	// processes do.
	svcNC, _, svcStore, err := open()
	if err != nil {
		p.Stop()
		return nil, err
	}
	svc := &control.WorkerService{NATS: svcNC, Store: svcStore, Pools: &control.OfferRegistry{Sources: []adapters.OfferSource{provider}}, Claims: claims,
		Metrics: metrics, Logger: quiet}
	if _, err := svc.Start(ctx); err != nil {
		p.Stop()
		return nil, err
	}
	for i := range nWorkers {
		nc, js, err := s.connect()
		if err != nil {
			p.Stop()
			return nil, err
		}
		p.closers = append(p.closers, nc.Close)
		workerID := fmt.Sprintf("bench-%d", i)
		dir, err := os.MkdirTemp(s.dir, "worker-")
		if err != nil {
			p.Stop()
			return nil, err
		}
		w, err := workers.New(workers.Config{
			Pool: pools[0].Pool, Slots: slots, Region: pools[0].Region, Country: pools[0].Country,
			WorkerID: workerID, AckWait: ackWait, DataDir: dir, Logger: quiet,
		}, nc, js, workers.NewServiceRecords(nc, pools[0].Pool, workerID), &workers.ObjectStore{JS: js})
		if err != nil {
			p.Stop()
			return nil, err
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if err := w.Run(ctx); err != nil {
				quiet.Error("worker stopped", "err", err)
			}
		}()
	}
	return p, nil
}

// session starts a measurement on clean streams and a fresh database: a
// client connection of its own, then a control plane with nWorkers
// in-process workers. before, when not nil, runs on the client's
// connection before the control plane starts. stop ends it all.
func (s *stack) session(ctx context.Context, nWorkers, slots int, ackWait time.Duration, before func(*nats.Conn, jetstream.JetStream) error) (p *plane, nc *nats.Conn, js jetstream.JetStream, dbURL string, stop func(), err error) {
	if err := s.resetStreams(ctx); err != nil {
		return nil, nil, nil, "", nil, err
	}
	if dbURL, err = s.freshDB(ctx, "gpuq", true); err != nil {
		return nil, nil, nil, "", nil, err
	}
	if nc, js, err = s.connect(); err != nil {
		return nil, nil, nil, "", nil, err
	}
	if before != nil {
		if err := before(nc, js); err != nil {
			nc.Close()
			return nil, nil, nil, "", nil, err
		}
	}
	if p, err = s.startPlane(ctx, dbURL, []local.PoolConfig{benchPool}, nWorkers, slots, ackWait); err != nil {
		nc.Close()
		return nil, nil, nil, "", nil, err
	}
	return p, nc, js, dbURL, func() { nc.Close(); p.Stop() }, nil
}

// Stop stops the workers as a shutdown would and closes the connections.
func (p *plane) Stop() {
	p.cancel(workers.ErrPreempted)
	p.wg.Wait()
	for _, c := range p.closers {
		c()
	}
}

// specFor parses a benchmark job's spec.
func specFor(command string) *queue.Spec {
	s, err := queue.ParseSpec([]byte("name: bench\nproject: bench\ncommand: " + command + "\n"))
	if err != nil {
		panic(err)
	}
	return s
}

// submitAll submits n jobs through queue.Submit from concurrency goroutines,
// the i-th with specs[i mod len(specs)], and returns once JetStream has
// stored every one.
func submitAll(ctx context.Context, js jetstream.JetStream, n, concurrency int, specs ...*queue.Spec) error {
	var next atomic.Int64
	errc := make(chan error, concurrency)
	for range concurrency {
		go func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if _, err := queue.Submit(ctx, js, specs[int(i)%len(specs)]); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	var first error
	for range concurrency {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// publishAll publishes n submissions straight to JetStream with a bounded
// window of asynchronous publishes, as a raw NATS client would, and waits for
// every acknowledgement.
func publishAll(ctx context.Context, js jetstream.JetStream, spec *queue.Spec, n int) error {
	body, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	for i := range n {
		msg := nats.NewMsg(queue.SubmitSubject(spec.Project))
		msg.Data = body
		msg.Header.Set(nats.MsgIdHdr, fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i))
		if _, err := js.PublishMsgAsync(msg); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Minute):
		return errors.New("publish acknowledgements did not arrive within 5 minutes")
	}
}

// measureSubmit times n durably accepted submissions; the scheduler is not
// running, so only the submission path is measured.
func (s *stack) measureSubmit(ctx context.Context, n, concurrency int, direct bool) (float64, error) {
	if err := s.resetStreams(ctx); err != nil {
		return 0, err
	}
	nc, js, err := s.connect()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	spec := specFor(`["gpuq:noop"]`)
	start := time.Now()
	if direct {
		err = publishAll(ctx, js, spec, n)
	} else {
		err = submitAll(ctx, js, n, concurrency, spec)
	}
	elapsed := time.Since(start)
	if err != nil {
		return 0, err
	}
	if got, err := s.streamMsgs(ctx, queue.StreamSubmit); err != nil || got != uint64(n) {
		return 0, fmt.Errorf("want %d stored submissions, got %d (%v)", n, got, err)
	}
	return float64(n) / elapsed.Seconds(), nil
}

// e2eResult is one end-to-end run.
type e2eResult struct {
	JobsPerSec float64   `json:"jobs_per_sec"`
	Seconds    float64   `json:"seconds"`
	CPU        cpuPerJob `json:"cpu_per_job"`
	// Statements is what each PostgreSQL statement cost, with
	// -pg-statements.
	Statements []stmtCost `json:"statements,omitempty"`
}

// measureE2E submits n jobs running command while the workers run (with
// preload: before the control plane and the workers start, timed from their
// start, as River's own benchmark times a queue filled beforehand), and
// times until every job's success is recorded in PostgreSQL and every run
// message is acknowledged. It then checks that each job has exactly one
// succeeded attempt.
func (s *stack) measureE2E(ctx context.Context, command string, n, nWorkers, slots, concurrency int, preload bool) (e2eResult, error) {
	// The end is heard as `gpuq wait` hears it, from the jobs' events, not
	// by counting rows: a count over the jobs table every 50 ms (a parallel
	// sequential scan) costs PostgreSQL more than some of what is measured.
	// PostgreSQL is asked once a second as well, in case an event was
	// missed, and decides the result.
	var succeeded, unsuccessful atomic.Int64
	spec := specFor(command)
	var start time.Time
	var cpuStart cpuSample
	listen := func(nc *nats.Conn, js jetstream.JetStream) error {
		sub, err := nc.Subscribe(queue.EventSubject("*"), func(m *nats.Msg) {
			switch state := eventState(m.Data); state {
			case queue.StateSucceeded:
				succeeded.Add(1)
			case queue.StateFailed, queue.StateDead, queue.StateRejected, queue.StateCancelled:
				unsuccessful.Add(1)
			}
		})
		if err != nil {
			return err
		}
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			return err
		}
		if preload {
			if err := submitAll(ctx, js, n, concurrency, spec); err != nil {
				return err
			}
		}
		if s.pgStatements {
			if err := s.resetStatements(ctx); err != nil {
				return err
			}
		}
		start, cpuStart = time.Now(), sampleCPU(s.pgData)
		return nil
	}
	p, _, js, dbURL, stop, err := s.session(ctx, nWorkers, slots, 30*time.Second, listen)
	if err != nil {
		return e2eResult{}, err
	}
	defer stop()
	if !preload {
		if s.pgStatements {
			if err := s.resetStatements(ctx); err != nil {
				return e2eResult{}, err
			}
		}
		start, cpuStart = time.Now(), sampleCPU(s.pgData)
		if err := submitAll(ctx, js, n, concurrency, spec); err != nil {
			return e2eResult{}, err
		}
	}
	lastAsked := time.Now()
	err = poll(ctx, 5*time.Millisecond, time.Duration(n)*20*time.Millisecond+time.Minute, "every job to succeed", func() (bool, error) {
		if bad := unsuccessful.Load(); bad > 0 {
			return false, fmt.Errorf("%d jobs ended unsuccessfully", bad)
		}
		done := succeeded.Load() >= int64(n)
		if !done && time.Since(lastAsked) > time.Second {
			lastAsked = time.Now()
			var recorded int
			if err := p.store.DB.QueryRowContext(ctx, `SELECT count(*) FROM jobs WHERE state = 'succeeded'`).Scan(&recorded); err != nil {
				return false, err
			}
			done = recorded >= n
		}
		if !done {
			return false, nil
		}
		left, err := s.streamMsgs(ctx, queue.StreamRun)
		return left == 0, err
	})
	elapsed, cpu := time.Since(start), cpuStart.perJob(sampleCPU(s.pgData), n)
	if err != nil {
		return e2eResult{}, err
	}
	if err := checkRecorded(ctx, p.store.DB, n); err != nil {
		return e2eResult{}, err
	}
	r := e2eResult{JobsPerSec: float64(n) / elapsed.Seconds(), Seconds: elapsed.Seconds(), CPU: cpu}
	if s.pgStatements {
		if r.Statements, err = s.statementCosts(ctx, dbURL, n); err != nil {
			return e2eResult{}, err
		}
	}
	return r, nil
}

// eventState reads the state of a job event.
func eventState(body []byte) queue.JobState {
	var ev struct {
		State queue.JobState `json:"state"`
	}
	if json.Unmarshal(body, &ev) != nil {
		return ""
	}
	return ev.State
}

// checkRecorded verifies that n jobs succeeded, each with exactly one
// attempt, recorded as succeeded.
func checkRecorded(ctx context.Context, db *sql.DB, n int) error {
	var jobs, attempts, good int
	err := db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM jobs WHERE state = 'succeeded'),
		(SELECT count(*) FROM attempts), (SELECT count(*) FROM attempts WHERE outcome = 'succeeded' AND ended_at IS NOT NULL)`).Scan(&jobs, &attempts, &good)
	if err != nil {
		return err
	}
	if jobs != n || good != n {
		return fmt.Errorf("want %d succeeded jobs and attempts recorded, got %d jobs, %d succeeded attempts of %d", n, jobs, good, attempts)
	}
	if attempts > n {
		progress("%d attempts for %d jobs: %d ended otherwise than succeeded", attempts, n, attempts-n)
	}
	return nil
}

// latencyResult is one dispatch latency run, in milliseconds.
type latencyResult struct {
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
	// PlacedP50 is submit → the "placed" event (the scheduler's share);
	// the rest is the worker's pull and claim.
	PlacedP50 float64 `json:"placed_p50_ms"`
}

// measureLatency submits n no-op jobs at rate per second to warm, idle
// workers and measures, per job, the time from the start of queue.Submit to
// the moment the bench receives the job's "running" event, which the worker
// announces after its claim is committed: an upper bound of submit → start.
func (s *stack) measureLatency(ctx context.Context, n, warmup int, rate float64, nWorkers, slots int) (latencyResult, error) {
	_, nc, js, _, stop, err := s.session(ctx, nWorkers, slots, 30*time.Second, nil)
	if err != nil {
		return latencyResult{}, err
	}
	defer stop()
	var mu sync.Mutex
	started, placed := map[uuid.UUID]time.Time{}, map[uuid.UUID]time.Time{}
	sub, err := nc.Subscribe(queue.EventSubject("*"), func(m *nats.Msg) {
		at := time.Now()
		var ev queue.Event
		if json.Unmarshal(m.Data, &ev) != nil {
			return
		}
		seen := map[queue.JobState]map[uuid.UUID]time.Time{queue.StateRunning: started, queue.StatePlaced: placed}[ev.State]
		mu.Lock()
		if _, ok := seen[ev.JobID]; seen != nil && !ok {
			seen[ev.JobID] = at
		}
		mu.Unlock()
	})
	if err != nil {
		return latencyResult{}, err
	}
	defer sub.Unsubscribe() //nolint:errcheck // closing
	spec := specFor(`["gpuq:noop"]`)
	submitted := map[uuid.UUID]time.Time{}
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	var measured []uuid.UUID
	for i := range warmup + n {
		<-tick.C
		at := time.Now()
		sub, err := queue.Submit(ctx, js, spec)
		if err != nil {
			return latencyResult{}, err
		}
		submitted[sub.JobID] = at
		if i >= warmup {
			measured = append(measured, sub.JobID)
		}
	}
	err = poll(ctx, 50*time.Millisecond, time.Minute, "every job to start", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range measured {
			if _, ok := started[id]; !ok {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return latencyResult{}, err
	}
	ms, placedMs := make([]float64, len(measured)), make([]float64, len(measured))
	mu.Lock()
	for i, id := range measured {
		ms[i] = float64(started[id].Sub(submitted[id])) / float64(time.Millisecond)
		placedMs[i] = float64(placed[id].Sub(submitted[id])) / float64(time.Millisecond)
	}
	mu.Unlock()
	return latencyResult{P50: percentile(ms, 50), P99: percentile(ms, 99), Max: percentile(ms, 100), PlacedP50: percentile(placedMs, 50)}, nil
}
