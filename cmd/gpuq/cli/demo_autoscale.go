package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

// The autoscaling act: two pools of the simulated cloud start at zero, the
// autoscaler rents machines as jobs arrive, the spot pool's trace takes its
// capacity away under a running job, which moves to on-demand, and every
// machine is released once idle.
const (
	demoSpotPool = "sim-spot"
	demoODPool   = "sim-od"
	// demoSpotUp is how long (trace ticks of one second) the spot pool
	// holds capacity before its trace drops to zero.
	demoSpotUp   = 10
	demoSpotDown = 60
	demoIdle     = 2 * time.Second
)

// DemoAutoscale is what the autoscaling act found.
type DemoAutoscale struct {
	Jobs      []DemoJobResult         `json:"jobs"`
	Instances []control.InstanceSpend `json:"instances"`
	Totals    []control.SpendLine     `json:"totals"`
	// MaxLive is the most instances live at once; ZeroAfter how long after
	// the last job ended none was live.
	MaxLive          int     `json:"max_live"`
	ZeroAfterSeconds float64 `json:"zero_after_seconds"`
}

// demoTrace writes the spot pool's trace: up for demoSpotUp ticks, down for
// demoSpotDown, then up for an hour, so that its preemption rate (one an
// hour) keeps spot the cheaper placement.
func demoTrace(dir string) (string, error) {
	var data []string
	for k := range demoSpotUp + demoSpotDown + 3600 {
		v := "1"
		if k >= demoSpotUp && k < demoSpotUp+demoSpotDown {
			v = "0"
		}
		data = append(data, v)
	}
	body := `{"metadata": {"gap_seconds": 1}, "data": [` + strings.Join(data, ",") + `]}`
	return "demo_spot.json", os.WriteFile(filepath.Join(dir, "demo_spot.json"), []byte(body), 0o644)
}

// autoscaleAct runs the act on the demo's NATS and PostgreSQL.
func (d *demoRun) autoscaleAct(ctx context.Context, stack *devStack, dir, exe string, logFile *os.File, logger *slog.Logger) (*DemoAutoscale, []string, error) {
	traces := filepath.Join(dir, "traces")
	if err := os.MkdirAll(traces, 0o755); err != nil {
		return nil, nil, err
	}
	trace, err := demoTrace(traces)
	if err != nil {
		return nil, nil, err
	}
	cv := viper.New()
	stack.configure(cv)
	cv.Set("traces", traces)
	cv.Set("sim-speed", 1.0)
	cv.Set("sim.pools", []map[string]any{
		{"pool": demoSpotPool, "region": "eu-sim-1", "country": "DE", "card": "cpu", "vcpu": 8, "memory_gb": 32, "tier": "spot",
			"price_per_hour": "0.90", "currency": "EUR", "trace": trace, "boot_delay": "1s", "grace": "3s"},
		{"pool": demoODPool, "region": "eu-sim-1", "country": "DE", "card": "cpu", "vcpu": 8, "memory_gb": 32, "tier": "on-demand",
			"price_per_hour": "3.60", "currency": "EUR", "boot_delay": "1s", "grace": "3s"},
	})
	cv.Set("autoscaler", map[string]any{"interval": "250ms",
		"defaults": map[string]any{"max": 2, "slots": 2, "idle_timeout": demoIdle.String(), "boot_timeout": "30s", "backoff": "30s"}})
	simulated, err := newSimDev(cv, logger)
	if err != nil {
		return nil, nil, err
	}
	simulated.workers.Executable, simulated.workers.Output = exe, logFile
	cv.Set(autoscaleKey, true)
	cv.Set(workerArgsKey, simulated.workerArgs())
	actCtx, stopAct := context.WithCancel(ctx)
	cloudDone := simulated.start(actCtx, stack)
	defer func() {
		stopAct()
		<-cloudDone
	}()
	c, err := startControlPlane(actCtx, cv, logger, simulated.sources()...)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	d.say("autoscaling: pools %s (spot, trace up %ds then down) and %s (on-demand) start at zero", demoSpotPool, demoSpotUp, demoODPool)

	specs := []struct{ name, spec string }{
		{"spot-long", "name: spot-long\ncommand: [sleep, \"12\"]\nplacement: {tier: spot-then-on-demand, residency: EU}\n"},
		{"burst-1", "name: burst-1\ncommand: [sleep, \"1\"]\nplacement: {tier: on-demand, residency: EU}\n"},
		{"burst-2", "name: burst-2\ncommand: [sleep, \"1\"]\nplacement: {tier: on-demand, residency: EU}\n"},
	}
	run := "scale-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ids := map[string]uuid.UUID{}
	for _, s := range specs {
		spec, err := queue.ParseSpec([]byte(s.spec + "idempotency_key: " + run + "-" + s.name + "\n"))
		if err != nil {
			return nil, nil, err
		}
		sub, err := queue.Submit(ctx, c.js, spec)
		if err != nil {
			return nil, nil, err
		}
		ids[s.name] = sub.JobID
		d.say("autoscaling: submitted %s", s.name)
	}
	var lastEnd time.Time
	seen := map[string]queue.InstanceState{}
	states := map[string]queue.JobState{}
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("autoscaling act unfinished: %w", err)
		}
		instances, err := c.store.Instances(ctx, "", "")
		if err != nil {
			return nil, nil, err
		}
		live := 0
		for _, in := range instances {
			if seen[in.ID] != in.State {
				seen[in.ID] = in.State
				d.say("autoscaling: instance %s %-10s %-10s %s", in.ID, in.Pool, in.State, in.Reason)
			}
			if in.State.Live() {
				live++
			}
		}
		done := true
		for _, s := range specs {
			j, err := c.store.Job(ctx, ids[s.name])
			if err != nil {
				done = false
				continue
			}
			if states[s.name] != j.State {
				states[s.name] = j.State
				d.say("autoscaling: %-9s %-9s pool %s", s.name, j.State, orDash(j.Pool))
			}
			done = done && j.State.Terminal()
		}
		if done && lastEnd.IsZero() {
			lastEnd = time.Now()
		}
		if done && live == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	zeroAfter := time.Since(lastEnd)
	d.say("autoscaling: every instance released %.1fs after the last job ended", zeroAfter.Seconds())

	r := &DemoAutoscale{ZeroAfterSeconds: zeroAfter.Seconds()}
	for _, s := range specs {
		job, err := c.store.Job(ctx, ids[s.name])
		if err != nil {
			return nil, nil, err
		}
		res := DemoJobResult{Name: s.name, ID: job.ID, Want: queue.StateSucceeded, State: job.State, Pool: job.Pool, Reason: job.Reason}
		if res.Attempts, err = c.store.Attempts(ctx, job.ID); err != nil {
			return nil, nil, err
		}
		r.Jobs = append(r.Jobs, res)
	}
	spend, err := control.Spend(ctx, c.store, d.start.Add(-time.Minute), time.Now())
	if err != nil {
		return nil, nil, err
	}
	r.Instances, r.Totals = spend.Instances, spend.Totals
	if err := c.store.DB.QueryRowContext(ctx, `
		SELECT COALESCE(max(c), 0) FROM (
			SELECT (SELECT count(*) FROM instances j WHERE j.requested_at <= i.requested_at
			        AND COALESCE(j.ended_at, 'infinity') > i.requested_at) AS c
			FROM instances i) x`).Scan(&r.MaxLive); err != nil {
		return nil, nil, err
	}
	return r, r.problems(), nil
}

// problems lists every expectation of the act that did not hold.
func (r *DemoAutoscale) problems() []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, "autoscaling: "+fmt.Sprintf(format, args...)) }
	for _, j := range r.Jobs {
		if j.State != queue.StateSucceeded {
			bad("%s ended %s, want succeeded (%s)", j.Name, j.State, orDash(j.Reason))
		}
		if j.Name != "spot-long" {
			continue
		}
		if len(j.Attempts) < 2 || j.Attempts[0].Pool != demoSpotPool || j.Attempts[0].Outcome != queue.OutcomePreempted || j.Pool != demoODPool {
			bad("spot-long: want a first attempt preempted on %s and the job finished on %s, got %s ending on %s",
				demoSpotPool, demoODPool, attemptSummary(j.Attempts), j.Pool)
		}
	}
	if r.MaxLive < 1 || r.MaxLive > 4 {
		bad("%d instances live at once, want 1–4 (two pools of at most two)", r.MaxLive)
	}
	if len(r.Totals) != 1 || r.Totals[0].Micros <= 0 || r.Totals[0].IdleMicros <= 0 {
		bad("spend totals %+v, want a cost with its idle part", r.Totals)
	}
	return out
}

func printDemoAutoscale(w io.Writer, r *DemoAutoscale) error {
	fmt.Fprintln(w)
	t := newTable(w, "INSTANCE", "POOL", "STATE", "BILLED", "COST", "JOBS", "IDLE")
	for _, in := range r.Instances {
		m := func(v int64) policy.Money { return policy.Money{Micros: v, Currency: in.Currency} }
		t.row(in.ID, in.Pool, in.State, (time.Duration(in.BilledSeconds) * time.Second).String(), m(in.CostMicros), m(in.JobsMicros), m(in.IdleMicros))
	}
	for _, tot := range r.Totals {
		m := func(v int64) policy.Money { return policy.Money{Micros: v, Currency: tot.Currency} }
		t.row("total", "-", "-", fmt.Sprintf("%.4f h", float64(tot.BilledSeconds)/3600), m(tot.Micros), m(tot.Micros-tot.IdleMicros), m(tot.IdleMicros))
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, j := range r.Jobs {
		fmt.Fprintf(w, "%-18s %s on %s: %s\n", j.Name, j.State, orDash(j.Pool), attemptSummary(j.Attempts))
	}
	fmt.Fprintf(w, "%-18s at most %d instances at once; zero %.1fs after the last job (idle timeout %s)\n", "autoscaling", r.MaxLive, r.ZeroAfterSeconds, demoIdle)
	return nil
}
