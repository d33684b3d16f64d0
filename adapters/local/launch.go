package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuq/gpuq/adapters"
)

// Launcher brings up local capacity: each instance is a `gpuq worker`
// process for one pool on this machine.
type Launcher struct {
	// Executable is the gpuq binary. Default os.Executable().
	Executable string
	// Args are passed to every worker after the pool's own flags
	// (connection URLs, ack wait…).
	Args []string
	// Slots per worker. Default 1.
	Slots int
	// Stdout and Stderr of the workers; default os.Stderr.
	Output *os.File
	// Env is added to this process's environment for every worker, after
	// the boot spec's (what the machine itself provides).
	Env []string
	// PoolEnv, when set, is added for the worker Launch starts for a pool
	// (its own NATS credential, say).
	PoolEnv func(PoolConfig) ([]string, error)
	// StopTimeout is how long Provider.Terminate waits after SIGTERM
	// before SIGKILL. Default 30s.
	StopTimeout time.Duration
}

func (l *Launcher) stopTimeout() time.Duration {
	if l == nil || l.StopTimeout == 0 {
		return 30 * time.Second
	}
	return l.StopTimeout
}

// Instance is one running worker process.
type Instance struct {
	Pool string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// ID is the instance id: local-<pid>.
func (i *Instance) ID() string { return "local-" + strconv.Itoa(i.cmd.Process.Pid) }

// PID of the worker process.
func (i *Instance) PID() int { return i.cmd.Process.Pid }

// Signal sends sig to the worker (SIGTERM: a preemption notice, unless the
// worker runs with --notice none; SIGINT: a shutdown; SIGKILL: a lost
// host).
func (i *Instance) Signal(sig syscall.Signal) error { return i.cmd.Process.Signal(sig) }

// Done is closed when the worker has exited.
func (i *Instance) Done() <-chan struct{} { return i.done }

// Wait waits for the worker to exit and returns how it ended.
func (i *Instance) Wait() error {
	<-i.done
	return i.err
}

// Launch starts a worker for pool.
func (l *Launcher) Launch(ctx context.Context, pool PoolConfig) (*Instance, error) {
	slots := l.Slots
	if slots == 0 {
		slots = 1
	}
	args := []string{"worker", "--pool", pool.Pool, "--region", pool.Region, "--country", pool.Country,
		"--slots", strconv.Itoa(slots)}
	if pool.Card != "" {
		// The worker's canary checks that the machine has what the pool offers.
		args = append(args, "--expect-card", pool.Card)
		if pool.GPUCount > 0 {
			args = append(args, "--expect-count", strconv.Itoa(pool.GPUCount))
		}
	}
	var env []string
	if l.PoolEnv != nil {
		var err error
		if env, err = l.PoolEnv(pool); err != nil {
			return nil, fmt.Errorf("launching a worker for pool %s: %w", pool.Pool, err)
		}
	}
	return l.Start(ctx, pool.Pool, args, env)
}

// Start runs the executable with args, then l.Args, in this process's
// environment less adapters.ControlPlaneEnv, plus env and l.Env: one
// instance of pool.
func (l *Launcher) Start(_ context.Context, pool string, args, env []string) (*Instance, error) {
	exe := l.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(exe, append(slices.Clip(args), l.Args...)...)
	own := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(adapters.ControlPlaneEnv, name)
	})
	cmd.Env = append(append(own, env...), l.Env...)
	out := l.Output
	if out == nil {
		out = os.Stderr
	}
	cmd.Stdout, cmd.Stderr = out, out
	tieToParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("launching a worker for pool %s: %w", pool, err)
	}
	inst := &Instance{Pool: pool, cmd: cmd, done: make(chan struct{})}
	go func() {
		inst.err = cmd.Wait()
		close(inst.done)
	}()
	return inst, nil
}
