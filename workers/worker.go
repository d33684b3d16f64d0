package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/batch"
	"github.com/gpuq/gpuq/workers/canary"
)

// Causes with which a job's context is cancelled; the worker decides between
// ack, nak and silence from context.Cause.
var (
	// ErrPreempted: the worker got a preemption notice, or its machine is
	// going away.
	ErrPreempted = errors.New("worker preempted")
	// ErrShutdown: the worker was told to stop. Its jobs take the
	// preemption's path (final checkpoint, record, hand back at once),
	// and are handed back with outcome shutdown, not preempted: the
	// machine was not taken away.
	ErrShutdown = fmt.Errorf("worker shutting down: %w", ErrPreempted)
	// ErrCancelled: a user cancelled the job.
	ErrCancelled = errors.New("job cancelled")
	// ErrTimeout: the job ran past spec.timeout.
	ErrTimeout = errors.New("job timed out")
)

// StopError is the control plane asking to stop a job for Reason (its
// budget): the job gets SIGTERM and its grace, as on a notice, and then ends
// failed.
type StopError struct {
	Reason string
}

func (e *StopError) Error() string { return "job stopped: " + e.Reason }

// MoveError is the control plane's request to hand a job back so that it
// moves to another pool: the job is stopped as on a preemption notice and
// handed back with outcome moved.
type MoveError struct {
	Reason string
}

func (e *MoveError) Error() string { return "job moved: " + e.Reason }

// Config is a worker's configuration.
type Config struct {
	// Pool whose consumer the worker pulls from. Required.
	Pool string
	// Slots is how many jobs run at once. Default 1.
	Slots int
	// Region and Country where the worker runs; checkpoints go to the
	// region's store, and jobs whose residency excludes Country are refused.
	// Default region "local", country "" (accepts only unconstrained jobs).
	Region  string
	Country string
	// WorkerID names this worker in attempts. Default host-pid.
	WorkerID string
	// AckWait of the pool's consumer and the length of a claim's lease.
	// Heartbeats come every AckWait/3. Default 30s.
	AckWait time.Duration
	// Grace is how long a job gets after SIGTERM to save its final
	// checkpoint and exit. Default 20s.
	Grace time.Duration
	// NoticeReserve is the time kept, after a job's grace and before a
	// provider's notice deadline, for recording the hand-back: a notice
	// that leaves less than Grace + NoticeReserve shortens the job's grace.
	// Default 1s.
	NoticeReserve time.Duration
	// DataDir holds each attempt's checkpoint and output directories.
	// Default: a new directory under the system temporary directory,
	// removed when Run returns.
	DataDir string
	// Executable is the gpuq binary jobs call for `gpuq checkpoint save`;
	// its directory is put first on the job's PATH. Default os.Executable().
	Executable string
	// NodeID names the machine: the provider's instance id where known.
	// Default: canary.NodeID (the host name).
	NodeID string
	// PassEnv names variables of the worker's environment that jobs get
	// too (e.g. CUDA_VISIBLE_DEVICES, HF_HOME); a job sees nothing else of
	// it. GPUQ_* names are refused: they are the worker's own settings and
	// the job's variables. Default none.
	PassEnv []string
	// Unpack bounds what restoring one checkpoint may write (the
	// storage.unpack_* keys of the configuration). Default: the defaults
	// of queue.ArchiveLimits.
	Unpack queue.ArchiveLimits
	// JobUser, when set, is the one user every job runs as, each in its
	// own 0700 directory (gpuq worker --run-as USER, as root).
	// Default: the worker's own user.
	JobUser *JobUser
	// JobUIDs, when set, gives each running attempt a uid (and the same
	// gid) of its own from the range, so that jobs of one machine can
	// neither read each other's files nor signal each other's processes;
	// gpuq worker sets it (default DefaultJobUIDs) when it runs as root
	// without --run-as. Needs root and at least Slots ids; excludes JobUser.
	JobUIDs *UIDRange
	// Canary, when set, gates pulling on the NVML canary.
	Canary *CanaryConfig
	// Progress is how often a step moving a job's archive (restoring its
	// checkpoint, fetching its working directory or inputs, uploading a
	// checkpoint or its outputs) says in the job's log how far it has
	// come, once it has lasted that long. Default 10s.
	Progress time.Duration
	Logger   *slog.Logger
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	host, _ := os.Hostname()
	if c.Slots == 0 {
		c.Slots = 1
	}
	if c.Region == "" {
		c.Region = "local"
	}
	if c.WorkerID == "" {
		c.WorkerID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.AckWait == 0 {
		c.AckWait = 30 * time.Second
	}
	if c.Grace == 0 {
		c.Grace = 20 * time.Second
	}
	if c.NoticeReserve == 0 {
		c.NoticeReserve = time.Second
	}
	if c.Progress <= 0 {
		c.Progress = defaultProgress
	}
	if c.Executable == "" {
		c.Executable, _ = os.Executable()
	}
	if c.NodeID == "" {
		c.NodeID = canary.NodeID("")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if err := queue.ValidatePool(c.Pool); err != nil {
		return fmt.Errorf("worker.pool: %w", err)
	}
	if c.Slots < 1 || c.Slots > 1024 {
		return fmt.Errorf("worker.slots: must be 1–1024, got %d", c.Slots)
	}
	if c.AckWait < time.Second {
		return fmt.Errorf("worker.ack-wait: must be at least 1s, got %s", c.AckWait)
	}
	if c.Grace <= 0 {
		return fmt.Errorf("worker.grace: must be positive, got %s", c.Grace)
	}
	for _, name := range c.PassEnv {
		if !envName.MatchString(name) {
			return fmt.Errorf("worker.pass-env: %q is not a variable name (letters, digits and _, not starting with a digit)", name)
		}
		if strings.HasPrefix(name, "GPUQ_") {
			return fmt.Errorf("worker.pass-env: %s: GPUQ_* variables are the worker's settings and the job's own variables and cannot be passed to jobs", name)
		}
	}
	if c.JobUIDs != nil {
		if c.JobUser != nil {
			return fmt.Errorf("worker.job-uids: jobs run as one user (worker.run-as %s) or each as its own uid of a range, not both", c.JobUser.Name)
		}
		if os.Geteuid() != 0 {
			return fmt.Errorf("worker.job-uids: only a worker running as root runs its jobs as other users")
		}
		if err := c.JobUIDs.validate(c.Slots); err != nil {
			return fmt.Errorf("worker.job-uids: %w", err)
		}
	}
	if c.NoticeReserve < 0 {
		return fmt.Errorf("worker.notice-reserve: must not be negative, got %s", c.NoticeReserve)
	}
	return nil
}

// envName is what a variable passed to jobs may be called.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// maxPulls bounds a worker's outstanding pull requests, well inside the
// consumer's MaxWaiting.
const maxPulls = 8

// pullRetryFirst and pullRetryMax bound the wait after a failed pull: the
// first retry comes quickly, a long outage is asked about every 10 s.
const (
	pullRetryFirst = 100 * time.Millisecond
	pullRetryMax   = 10 * time.Second
)

// Worker pulls a pool's jobs and runs them.
type Worker struct {
	cfg      Config
	host     string
	pid      int // the worker's, named in each claim
	js       jetstream.JetStream
	nc       *nats.Conn
	store    Records
	archives ArchiveStore

	gateMu sync.Mutex
	canary *canaryGate
	// ownDataDir is true when the worker made its data directory up.
	ownDataDir bool
	// uids hands out the attempts' own uids (Config.JobUIDs).
	uids *uidPool
	// running holds the attempts whose job process is up, for Warn.
	runningMu sync.Mutex
	running   map[*attempt]struct{}
	claims    *batch.Batcher[queue.ClaimRequest, queue.ClaimResult]
	successes *batch.Batcher[queue.AttemptRef, bool]
	beats     *beats
	// health pauses the worker after host errors in a row.
	health *hostHealth
}

// New returns a worker; nc carries cancellation notices and must belong to js.
func New(cfg Config, nc *nats.Conn, js jetstream.JetStream, store Records, archives ArchiveStore) (*Worker, error) {
	ownDataDir := cfg.DataDir == ""
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if ownDataDir {
		dir, err := os.MkdirTemp("", "gpuq-worker-")
		if err != nil {
			return nil, err
		}
		cfg.DataDir = dir
	} else if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, err
	}
	var uids *uidPool
	if cfg.JobUser != nil || cfg.JobUIDs != nil {
		var who string
		if cfg.JobUser != nil {
			who = "user " + cfg.JobUser.Name
		} else {
			who = "uids " + cfg.JobUIDs.String()
		}
		err := prepareJobUser(&cfg, who)
		if err == nil && cfg.JobUIDs != nil {
			uids, err = newUIDPool(*cfg.JobUIDs, jobUIDLockDir())
		}
		if err != nil {
			if ownDataDir {
				os.RemoveAll(cfg.DataDir)
			}
			return nil, err
		}
	}
	host, _ := os.Hostname()
	if sr, ok := store.(*ServiceRecords); ok && sr.WorkerID == "" {
		sr.WorkerID = cfg.WorkerID
	}
	return &Worker{cfg: cfg, host: host, pid: os.Getpid(), js: js, nc: nc, store: store, archives: archives, ownDataDir: ownDataDir, uids: uids,
		claims: batch.New(store.ClaimMany), successes: batch.New(store.SucceedMany), beats: newBeats(), health: newHostHealth()}, nil
}

// Run pulls and runs jobs until ctx ends. When ctx is cancelled with cause
// ErrPreempted, ErrShutdown or a *Preemption (a provider's notice), the worker
// stops pulling, records the notice against each running attempt at once,
// hands each running job SIGTERM and Grace (cut to fit the notice's
// deadline) to save its final checkpoint, records it, and naks the job so
// that another worker resumes it at once. Run returns when every job has
// been handed back.
func (w *Worker) Run(ctx context.Context) error {
	cons, err := queue.EnsurePoolConsumer(context.WithoutCancel(ctx), w.js, w.cfg.Pool, w.cfg.AckWait)
	if err != nil {
		return err
	}
	if w.cfg.Canary != nil {
		if w.canary, err = newCanaryGate(ctx, *w.cfg.Canary, w.store, w.cfg.NodeID, w.cfg.Logger); err != nil {
			if ctx.Err() != nil {
				return nil // stopped while waiting for a control plane
			}
			return err
		}
	}
	w.cfg.Logger.Info("worker ready", "pool", w.cfg.Pool, "slots", w.cfg.Slots, "region", w.cfg.Region, "worker", w.cfg.WorkerID, "node", w.cfg.NodeID)
	// The batchers outlive every attempt: they stop after running.Wait.
	batchCtx, stopBatchers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBatchers()
	go w.claims.Run(batchCtx)
	go w.successes.Run(batchCtx)
	// The first beat goes before the first pull, so that the liveness
	// monitor knows the worker before it claims anything: a worker lost
	// with its first job has that job handed back like any other.
	w.sendBeat()
	go w.announce(batchCtx)
	if w.ownDataDir {
		// Every attempt removes its own directory; the worker's goes last,
		// after running.Wait below (deferred calls run last-in first-out),
		// so a job saving its final checkpoint on a notice still finds it.
		defer os.RemoveAll(w.cfg.DataDir)
	}
	var running sync.WaitGroup
	defer running.Wait()
	slots := make(chan struct{}, w.cfg.Slots)
	pulls := make(chan struct{}, maxPulls)
	// A failing pull (NATS restarting, the consumer being recreated) is
	// tried again after a wait that doubles, with jitter so that a pool's
	// workers do not come back in step, up to pullRetryMax.
	retry := queue.NewBackoff(pullRetryFirst, pullRetryMax)
	for ctx.Err() == nil {
		if d := w.health.pause(); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
			continue
		}
		if w.canary != nil {
			ready, err := w.canaryReady(ctx)
			if err != nil {
				return err
			}
			if !ready {
				continue
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		n := 1
		for n < w.cfg.Slots {
			select {
			case slots <- struct{}{}:
				n++
				continue
			default:
			}
			break
		}
		select {
		case pulls <- struct{}{}:
		case <-ctx.Done():
			for range n {
				<-slots
			}
			continue
		}
		// The pull ends when the server says so (its expiry, or n
		// messages), never on the worker's side first: a message the server
		// sent to a pull the worker had stopped reading would be lost until
		// AckWait redelivers it. Messages that arrive after a notice are
		// handed back below.
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(pullExpiry))
		if err != nil {
			<-pulls
			for range n {
				<-slots
			}
			if ctx.Err() != nil {
				break
			}
			wait := retry.NextBackOff()
			w.cfg.Logger.Warn("pulling jobs", "pool", w.cfg.Pool, "err", err, "retry_in", wait.Round(time.Millisecond))
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
			continue
		}
		retry.Reset()
		// The batch is consumed in the background, so that a slot freed
		// meanwhile is offered in a new pull at once rather than after this
		// one ends. The puller counts as running until it has started every
		// attempt it pulled, so running.Wait sees them all.
		running.Add(1)
		go func() {
			defer running.Done()
			defer func() { <-pulls }()
			got := 0
			for msg := range batch.Messages() {
				got++
				if ctx.Err() != nil {
					// Pulled after the notice: hand it straight back.
					msg.Nak() //nolint:errcheck // redelivered after AckWait otherwise
					<-slots
					continue
				}
				if w.health.pause() > 0 {
					// Pulled as host errors paused the worker: another
					// worker takes it once this pull has ended.
					msg.NakWithDelay(pullExpiry) //nolint:errcheck // redelivered after AckWait otherwise
					<-slots
					continue
				}
				running.Add(1)
				go func() {
					defer running.Done()
					defer func() { <-slots }()
					w.handle(ctx, msg)
					w.jobDone()
				}()
			}
			for range n - got {
				<-slots
			}
		}()
	}
	return nil
}
