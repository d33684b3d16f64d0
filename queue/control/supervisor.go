package control

import (
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"syscall"
	"time"

	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue"
)

// WorkerLauncher starts one worker process for a pool on this machine.
type WorkerLauncher interface {
	Launch(ctx context.Context, pool local.PoolConfig) (*local.Instance, error)
}

// Supervisor keeps one worker of each local pool running, as a cloud would
// replace a lost instance: a worker that dies (killed, crashed) is replaced.
// It is what `gpuq dev` runs in place of an autoscaler.
type Supervisor struct {
	Launcher WorkerLauncher
	// Logger; default slog.Default().
	Logger *slog.Logger
	// QuarantinedExit is the exit status of a worker whose node the canary
	// quarantined; such a worker is not replaced on this machine, where a
	// replacement would fail the same way. 0 means none is special.
	QuarantinedExit int
	// Retry is how long to wait after a failed launch, or a worker that
	// exited within 5s of its launch; each such failure in a row doubles
	// the wait, up to a minute. Default 1s.
	Retry time.Duration
}

// WithDefaults returns s with every unset default filled in.
func (s Supervisor) WithDefaults() Supervisor {
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Retry == 0 {
		s.Retry = time.Second
	}
	return s
}

func (s Supervisor) validate() error {
	if s.Launcher == nil {
		return errors.New("supervisor.launcher: must be set")
	}
	if s.Retry < 0 {
		return errors.New("supervisor.retry: must not be negative")
	}
	return nil
}

const (
	quickExit       = 5 * time.Second
	maxRelaunchWait = time.Minute
)

// Supervise keeps one worker of pool running until ctx ends; at the end it
// stops the worker with SIGTERM and waits for it.
func (s *Supervisor) Supervise(ctx context.Context, pool local.PoolConfig) error {
	cfg := s.WithDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	// failures counts launches in a row that failed or whose worker exited
	// within quickExit: each waits longer before the next, so a worker that
	// cannot start (a bad flag, no NATS) is not relaunched in a tight loop.
	failures := 0
	for ctx.Err() == nil {
		if failures > 0 {
			select {
			case <-ctx.Done():
				continue
			case <-time.After(queue.RetryDelay(failures, cfg.Retry, maxRelaunchWait)):
			}
		}
		inst, err := cfg.Launcher.Launch(ctx, pool)
		if err != nil {
			failures++
			cfg.Logger.Error("launching worker", "pool", pool.Pool, "err", err)
			continue
		}
		launched := time.Now()
		select {
		case <-inst.Done():
			if time.Since(launched) < quickExit {
				failures++
			} else {
				failures = 0
			}
			err := inst.Wait()
			var exit *exec.ExitError
			if cfg.QuarantinedExit != 0 && errors.As(err, &exit) && exit.ExitCode() == cfg.QuarantinedExit {
				// A cloud adapter releases the instance; locally there is
				// no other machine to launch.
				cfg.Logger.Error("worker's node quarantined; not relaunching on this machine (see gpuq nodes)", "pool", pool.Pool)
				return nil
			}
			cfg.Logger.Warn("worker exited; launching a replacement", "pool", pool.Pool, "instance", inst.ID(), "err", err)
		case <-ctx.Done():
			inst.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
			inst.Wait()                  //nolint:errcheck // shutting down
		}
	}
	return nil
}
