package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/workers/canary"
)

// ErrQuarantined is returned by Run when the node failed its canary
// Schedule.QuarantineAfter times in a row (counted across worker restarts):
// the worker takes no more work there, so that its capacity can be replaced.
var ErrQuarantined = errors.New("node quarantined")

// noControlPlaneWait is how long a starting worker waits before asking
// again for its node's record when no control plane answered.
const noControlPlaneWait = 2 * time.Second

// CanaryConfig makes a worker prove its node with the NVML canary before it
// pulls any job, and again on Schedule.
type CanaryConfig struct {
	Expect   canary.Expectations
	Schedule canary.Schedule
	// Library is NVML; nil uses the system's.
	Library canary.Library
}

// canaryGate runs the canary when due and records every run against the node.
type canaryGate struct {
	cfg        CanaryConfig
	gate       *canary.Gate
	priorFails int // consecutive failures recorded before this worker started
	lastRun    int64
}

func newCanaryGate(ctx context.Context, cfg CanaryConfig, store Records, nodeID string, log *slog.Logger) (*canaryGate, error) {
	cfg.Expect = cfg.Expect.WithDefaults()
	if err := cfg.Expect.Validate(); err != nil {
		return nil, fmt.Errorf("worker canary: %w", err)
	}
	cfg.Schedule = cfg.Schedule.WithDefaults()
	gate, err := canary.NewGate(cfg.Schedule)
	if err != nil {
		return nil, fmt.Errorf("worker canary: %w", err)
	}
	g := &canaryGate{cfg: cfg, gate: gate}
	node, err := store.Node(ctx, nodeID)
	// A worker may start before any control plane answers (a machine
	// booted while the control plane restarts): it waits for one.
	for waiting, said := time.Now(), (time.Time{}); errors.Is(err, ErrNoControlPlane); node, err = store.Node(ctx, nodeID) {
		if time.Since(said) >= 30*time.Second {
			said = time.Now()
			log.Warn("waiting for a control plane to answer", "node", nodeID, "waited", time.Since(waiting).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(noControlPlaneWait):
		}
	}
	switch {
	case errors.Is(err, queue.ErrNotFound):
	case err != nil:
		return nil, err
	case node.QuarantinedAt != nil:
		return nil, fmt.Errorf("%w: %s since %s: %s", ErrQuarantined, nodeID, node.QuarantinedAt.Format(time.RFC3339), node.QuarantineReason)
	default:
		g.priorFails = node.ConsecutiveFailures
	}
	if g.cfg.Library == nil {
		g.cfg.Library = canary.System()
	}
	return g, nil
}

// ready runs the canary if it is due and reports whether the worker may
// pull now; when it may not, it waits until the canary is due again (or ctx
// ends) and returns false. It returns ErrQuarantined once the node is.
func (w *Worker) canaryReady(ctx context.Context) (bool, error) {
	g := w.canary
	w.gateMu.Lock()
	now := time.Now()
	if g.gate.Due(now) {
		report := canary.Run(ctx, g.cfg.Library, g.cfg.Expect)
		if ctx.Err() != nil {
			w.gateMu.Unlock()
			return false, nil
		}
		state := g.gate.Observe(now, report)
		fails := g.gate.ConsecutiveFailures()
		if report.OK {
			g.priorFails = 0
		}
		quarantine := state == canary.Quarantined || (!report.OK && g.priorFails+fails >= g.cfg.Schedule.QuarantineAfter)
		reason := g.gate.Reason()
		if quarantine && state != canary.Quarantined {
			reason = fmt.Sprintf("node quarantined after %d canary failures in a row: %s", g.priorFails+fails, report.Summary())
		}
		body, _ := json.Marshal(report)
		id, _, err := w.store.RecordCanary(context.WithoutCancel(ctx), queue.CanaryRecord{
			NodeID: w.cfg.NodeID, Pool: w.cfg.Pool, Host: w.host, OK: report.OK, Summary: report.Summary(),
			Report: body, Quarantine: quarantine, Reason: reason,
		})
		if err != nil {
			w.cfg.Logger.Error("recording the canary", "node", w.cfg.NodeID, "err", err)
		}
		if report.OK {
			g.lastRun = id
			w.cfg.Logger.Info("canary passed", "node", w.cfg.NodeID, "took", report.Duration)
		} else {
			w.cfg.Logger.Error("canary failed: taking no work", "node", w.cfg.NodeID, "failures_in_a_row", g.priorFails+fails, "drift", report.Summary())
		}
		if quarantine {
			w.gateMu.Unlock()
			return false, fmt.Errorf("%w: %s", ErrQuarantined, reason)
		}
	}
	if g.gate.MayPull(now) {
		w.gateMu.Unlock()
		return true, nil
	}
	at, ok := g.gate.NextDue()
	w.gateMu.Unlock()
	wait := time.Until(at)
	if !ok || wait <= 0 {
		wait = time.Second
	}
	select {
	case <-ctx.Done():
	case <-time.After(wait):
	}
	return false, nil
}

// jobDone counts a finished job towards the canary's schedule.
func (w *Worker) jobDone() {
	if w.canary == nil {
		return
	}
	w.gateMu.Lock()
	w.canary.gate.JobDone()
	w.gateMu.Unlock()
}

// canaryRunID is the run the next attempts ran after.
func (w *Worker) canaryRunID() int64 {
	if w.canary == nil {
		return 0
	}
	w.gateMu.Lock()
	defer w.gateMu.Unlock()
	return w.canary.lastRun
}
