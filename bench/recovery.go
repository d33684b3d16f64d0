package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue"
)

// recoveryResult is the time from losing a worker to the job running again
// on another one, in milliseconds, over trials.
type recoveryResult struct {
	Trials int       `json:"trials"`
	P50    float64   `json:"p50_ms"`
	Max    float64   `json:"max_ms"`
	All    []float64 `json:"all_ms"`
}

// measureRecovery runs trials in which a `gpuq worker` process running a
// long job receives sig (SIGKILL: a lost host; SIGTERM: a preemption
// notice), and times from the signal until another worker process announces
// that it runs the job under the next attempt. The control plane runs in
// this process; the workers are real processes of the gpuq binary.
func (s *stack) measureRecovery(ctx context.Context, gpuqBin string, sig syscall.Signal, trials int, ackWait, grace time.Duration) (res recoveryResult, err error) {
	p, nc, js, _, stop, err := s.session(ctx, 0, 1, time.Minute, nil)
	if err != nil {
		return recoveryResult{}, err
	}
	defer stop()
	logFile, err := os.Create(s.dir + "/recovery-workers.log")
	if err != nil {
		return recoveryResult{}, err
	}
	defer logFile.Close()
	defer func() {
		if err != nil {
			out, _ := os.ReadFile(logFile.Name())
			progress("worker output:\n%s", out[max(0, len(out)-6000):])
		}
	}()
	// Workers are started as gpuq dev starts them: the credential in the
	// environment, scoped to the pool, the default data directory, and the
	// default AckWait unless -ack-wait says otherwise.
	cred, err := s.nats.Issuer.IssueWorker(benchPool.Pool, benchPool.Region, "")
	if err != nil {
		return recoveryResult{}, err
	}
	args := []string{"--nats-url", s.nats.URL(), "--grace", grace.String()}
	if ackWait > 0 {
		args = append(args, "--ack-wait", ackWait.String())
	}
	launcher := &local.Launcher{Executable: gpuqBin, Output: logFile, Env: []string{"GPUQ_NATS_CREDENTIAL=" + cred.String()}, Args: args}
	workers := map[int]*local.Instance{}
	launch := func() error {
		inst, err := launcher.Launch(ctx, benchPool)
		if err != nil {
			return err
		}
		workers[inst.PID()] = inst
		return nil
	}
	defer func() {
		for _, inst := range workers {
			inst.Signal(syscall.SIGKILL) //nolint:errcheck // it may have exited
			inst.Wait()                  //nolint:errcheck // killed
		}
	}()
	for range 2 {
		if err := launch(); err != nil {
			return recoveryResult{}, err
		}
	}

	// running[job][attempt] is when the bench saw the attempt announced.
	var mu sync.Mutex
	running := map[uuid.UUID]map[int]time.Time{}
	sub, err := nc.Subscribe(queue.EventSubject("*"), func(m *nats.Msg) {
		at := time.Now()
		var ev queue.Event
		if json.Unmarshal(m.Data, &ev) != nil || ev.State != queue.StateRunning {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if running[ev.JobID] == nil {
			running[ev.JobID] = map[int]time.Time{}
		}
		running[ev.JobID][ev.Attempt] = at
	})
	if err != nil {
		return recoveryResult{}, err
	}
	defer sub.Unsubscribe() //nolint:errcheck // closing
	seen := func(id uuid.UUID, attempt int) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		t, ok := running[id][attempt]
		return t, ok
	}
	cons, err := js.Consumer(ctx, queue.StreamRun, queue.PoolConsumer(benchPool.Pool))
	for err != nil {
		// The first worker creates the pool's consumer.
		select {
		case <-ctx.Done():
			return recoveryResult{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		cons, err = js.Consumer(ctx, queue.StreamRun, queue.PoolConsumer(benchPool.Pool))
	}
	spec := specFor(`[sleep, "3600"]`)
	var all []float64
	for trial := range trials {
		sub, err := queue.Submit(ctx, js, spec)
		if err != nil {
			return recoveryResult{}, err
		}
		id := sub.JobID
		if err := poll(ctx, 10*time.Millisecond, time.Minute, "the job to start", func() (bool, error) {
			_, ok := seen(id, 1)
			return ok, nil
		}); err != nil {
			return recoveryResult{}, err
		}
		attempts, err := p.store.Attempts(ctx, id)
		if err != nil || len(attempts) != 1 {
			return recoveryResult{}, fmt.Errorf("want one attempt of job %s, got %d (%v)", id, len(attempts), err)
		}
		victim := workers[attempts[0].PID]
		if victim == nil {
			return recoveryResult{}, fmt.Errorf("job %s runs on an unknown worker pid %d", id, attempts[0].PID)
		}
		// The other worker must be idle and pulling before the signal.
		if err := poll(ctx, 10*time.Millisecond, time.Minute, "the other worker to pull", func() (bool, error) {
			info, err := cons.Info(ctx)
			return err == nil && info.NumWaiting > 0, err
		}); err != nil {
			return recoveryResult{}, err
		}
		signalled := time.Now()
		if err := victim.Signal(sig); err != nil {
			return recoveryResult{}, err
		}
		if err := poll(ctx, 5*time.Millisecond, 2*time.Minute, "the job to run again", func() (bool, error) {
			_, ok := seen(id, 2)
			return ok, nil
		}); err != nil {
			return recoveryResult{}, err
		}
		again, _ := seen(id, 2)
		ms := float64(again.Sub(signalled)) / float64(time.Millisecond)
		all = append(all, ms)
		progress("recovery after %s: trial %d/%d: %.0f ms", sig, trial+1, trials, ms)
		victim.Wait() //nolint:errcheck // killed or stopped on notice
		delete(workers, victim.PID())
		if err := p.store.Cancel(ctx, id, "benchmark trial over"); err != nil {
			return recoveryResult{}, err
		}
		if err := queue.NotifyCancel(nc, id); err != nil {
			return recoveryResult{}, err
		}
		if err := launch(); err != nil {
			return recoveryResult{}, err
		}
	}
	return recoveryResult{Trials: trials, P50: percentile(all, 50), Max: percentile(all, 100), All: all}, nil
}
