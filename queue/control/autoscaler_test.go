package control_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/adapters/sim"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
)

var gpuqBinary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// gpuqBin builds the gpuq binary the simulated instances boot, once per
// test binary: the instances run real `gpuq worker` processes.
func gpuqBin(t testing.TB) string {
	t.Helper()
	b := &gpuqBinary
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "gpuq-control-bin-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "gpuq")
		out, err := exec.Command("go", "build", "-o", b.path, "github.com/gpuq/gpuq/cmd/gpuq").CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func removeGpuqBinary() {
	if gpuqBinary.dir != "" {
		os.RemoveAll(gpuqBinary.dir)
	}
}

// scaled is a control plane with an autoscaler over a simulated cloud whose
// instances run real worker processes, on real JetStream and PostgreSQL.
type scaled struct {
	n        *queuetest.NATS
	s        *store.Store
	cloud    *sim.Cloud
	provider *sim.Provider
	placer   *control.PolicyPlacer
	auto     *control.Autoscaler
	reaper   *control.Reaper
	logs     *os.File
}

// simPool is a CPU pool of the simulated cloud priced in EUR.
func simPool(name, country, tier, price string) sim.PoolConfig {
	return sim.PoolConfig{Pool: name, Region: "r-" + name, Country: country, Card: "cpu", VCPU: 8, MemoryGB: 32,
		Tier: tier, PricePerHour: price, Currency: "EUR", Grace: 3 * time.Second}
}

// startScaled starts the cloud, the scheduler, reconciler and replacer and
// (unless noAutoscaler) the autoscaler and the reaper.
func startScaled(t testing.TB, pools []sim.PoolConfig, limits control.AutoscalerConfig, noAutoscaler bool) *scaled {
	t.Helper()
	return startScaledBooting(t, gpuqBin(t), pools, limits, noAutoscaler)
}

// startScaledBooting is startScaled with the simulated machines booting
// image instead of the gpuq binary.
func startScaledBooting(t testing.TB, image string, pools []sim.PoolConfig, limits control.AutoscalerConfig, noAutoscaler bool) *scaled {
	t.Helper()
	c := &scaled{n: queuetest.StartNATS(t)}
	c.s, _ = queuetest.Store(t, c.n)
	logs, err := os.Create(filepath.Join(t.TempDir(), "workers.log"))
	if err != nil {
		t.Fatal(err)
	}
	c.logs = logs
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(logs.Name()); err == nil && len(b) > 0 {
				t.Logf("worker output (last 4 KiB):\n%s", b[max(0, len(b)-4096):])
			}
		}
		logs.Close()
	})
	// The machine image holds nothing: each machine's NATS credential,
	// scoped to its pool, comes with its boot spec.
	workers := &local.Launcher{Executable: image, Output: logs}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	if c.cloud, err = sim.New(sim.Config{Pools: pools, Step: 20 * time.Millisecond}, workers, logger, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cloudDone := make(chan struct{})
	go func() { defer close(cloudDone); c.cloud.Run(ctx) }() //nolint:errcheck // ends with ctx
	c.provider = c.cloud.Provider(adapters.RetryConfig{Attempts: 2, Backoff: time.Millisecond, MaxWait: time.Second, AttemptTimeout: 5 * time.Second})
	c.placer = &control.PolicyPlacer{Sources: []adapters.OfferSource{c.provider}, OfferTTL: 200 * time.Millisecond}
	plane := &control.Plane{JS: c.n.JS, Store: c.s, Placer: c.placer, Logger: logger}
	planeErrs := plane.Start(ctx)
	svc := &control.WorkerService{NATS: c.n.NC, Store: c.s, Pools: &control.OfferRegistry{Sources: c.placer.Sources}, Placer: c.placer, JS: c.n.JS, Logger: logger}
	if _, err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 3)
	c.auto = &control.Autoscaler{Providers: []control.InstanceProvider{c.provider}, Store: c.s, Workers: c.s, Exhaustions: c.s, JS: c.n.JS,
		Placer: c.placer, Config: limits, Logger: logger,
		// Short leases so a drained worker's hand-back is quick; --grace
		// inside the pool's grace so the worker records before SIGKILL.
		Boot: control.BootTemplate{NATSURL: c.n.Server.URL(), Credentials: control.IssuedCredentials{Issuer: c.n.Server.Issuer}, WorkerArgs: []string{"--ack-wait", "5s", "--grace", "2s"}}}
	c.reaper = &control.Reaper{Providers: []control.ReaperProvider{c.provider}, Store: c.s, Interval: time.Second, Grace: 2 * time.Second, Logger: logger}
	// Every instance change is announced on JetStream, as the server does.
	announcer := &control.InstanceAnnouncer{Store: c.s, JS: c.n.JS, Logger: logger}
	c.s.InstanceSink = announcer
	go func() { errc <- announcer.Run(ctx) }()
	loops := 4
	if !noAutoscaler {
		loops += 2
		go func() { errc <- c.auto.Run(ctx) }()
		go func() { errc <- c.reaper.Run(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		for range 3 {
			if err := <-planeErrs; err != nil {
				t.Errorf("control loop: %v", err)
			}
		}
		for range loops - 3 {
			if err := <-errc; err != nil {
				t.Errorf("control loop: %v", err)
			}
		}
		<-cloudDone
	})
	return c
}

func (c *scaled) submit(t testing.TB, yaml string) uuid.UUID {
	t.Helper()
	spec, err := queue.ParseSpec([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := queue.Submit(context.Background(), c.n.JS, spec)
	if err != nil {
		t.Fatal(err)
	}
	return sub.JobID
}

func (c *scaled) job(t testing.TB, id uuid.UUID) *queue.Job {
	t.Helper()
	j, err := c.s.Job(context.Background(), id)
	if errors.Is(err, queue.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (c *scaled) live(t testing.TB) []*queue.Instance {
	t.Helper()
	live, err := c.s.LiveInstances(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return live
}

// maxOverlap is the most instances of pool recorded live at one time,
// read from the instance table: each one from its request to its end.
func maxOverlap(t *testing.T, s *store.Store, pool string) int {
	t.Helper()
	var n int
	err := s.DB.QueryRow(`
		SELECT COALESCE(max(c), 0) FROM (
			SELECT (SELECT count(*) FROM instances j WHERE j.pool = i.pool AND j.requested_at <= i.requested_at
			        AND COALESCE(j.ended_at, 'infinity') > i.requested_at) AS c
			FROM instances i WHERE i.pool = $1) x`, pool).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestFiftyJobsIntoAnEmptySystemScaleUpWithinMaxSucceedOnceAndScaleBackToZero(t *testing.T) {
	t.Parallel()
	const interval, idle = 200 * time.Millisecond, 2 * time.Second
	pools := []sim.PoolConfig{simPool("od", "DE", "on-demand", "0.36")}
	pools[0].BootDelay = time.Millisecond
	c := startScaled(t, pools, control.AutoscalerConfig{Interval: interval,
		Defaults: control.PoolLimits{Max: 3, Slots: 2, IdleTimeout: idle, BootTimeout: 30 * time.Second}}, false)
	if live := c.live(t); len(live) != 0 {
		t.Fatalf("instances before any job: %v", live)
	}
	start := time.Now()
	var ids []uuid.UUID
	for i := range 50 {
		ids = append(ids, c.submit(t, fmt.Sprintf("name: j%d\ncommand: [sleep, \"0.2\"]\nplacement: {residency: EU}\n", i)))
	}
	queuetest.Eventually(t, 90*time.Second, "50 jobs to succeed", func() bool {
		for _, id := range ids {
			if j := c.job(t, id); j == nil || j.State != queue.StateSucceeded {
				return false
			}
		}
		return true
	})
	done := time.Now()
	t.Logf("50 jobs succeeded %s after the first submission", done.Sub(start).Round(time.Millisecond))
	for _, id := range ids {
		attempts, err := c.s.Attempts(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		wins := 0
		for _, a := range attempts {
			if a.Outcome == queue.OutcomeSucceeded {
				wins++
			}
		}
		if wins != 1 {
			t.Fatalf("job %s succeeded %d times: %+v", id, wins, attempts)
		}
	}
	// The last job ended before done; a drained instance ends with its
	// worker's exit, which the next pass records.
	deadline := idle + interval + 3*time.Second
	queuetest.Eventually(t, deadline, "zero live instances after the idle timeout", func() bool { return len(c.live(t)) == 0 })
	t.Logf("zero instances %s after the last job", time.Since(done).Round(time.Millisecond))
	if n := maxOverlap(t, c.s, "od"); n > 3 || n == 0 {
		t.Fatalf("at most %d instances were live at once; want 1–3", n)
	}
	if n := c.cloud.Created(); n > 6 {
		t.Fatalf("the cloud created %d instances for 50 short jobs on a pool of 3", n)
	}

	// Spend: gpuq's report against the table, priced independently here
	// (per-second billing, rounded up, micros rounded down per instance).
	var want int64
	if err := c.s.DB.QueryRow(`SELECT COALESCE(sum(price_micros * ceil(extract(epoch FROM ended_at - launched_at))::bigint / 3600), 0)
		FROM instances WHERE launched_at IS NOT NULL`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	report, err := control.Spend(context.Background(), c.s, start.Add(-time.Hour), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Totals) != 1 || report.Totals[0].Micros != want || want == 0 {
		t.Fatalf("spend totals %+v, want %d EUR micros from the instance table", report.Totals, want)
	}
	if tot := report.Totals[0]; tot.IdleMicros <= 0 || tot.IdleMicros >= tot.Micros {
		t.Fatalf("idle %d of %d: the idle timeout must cost something, and the jobs too", tot.IdleMicros, tot.Micros)
	}
	var jobs int64
	for _, p := range report.Projects {
		jobs += p.Micros
	}
	if jobs+report.Totals[0].IdleMicros != report.Totals[0].Micros {
		t.Fatalf("projects %d + idle %d != total %d", jobs, report.Totals[0].IdleMicros, report.Totals[0].Micros)
	}
}

func TestAnInstancesLifeIsAnnouncedOnJetStreamInOrderExactlyAsRecorded(t *testing.T) {
	t.Parallel()
	pools := []sim.PoolConfig{simPool("od", "DE", "on-demand", "0.36")}
	pools[0].BootDelay = time.Millisecond
	c := startScaled(t, pools, control.AutoscalerConfig{Interval: 200 * time.Millisecond,
		Defaults: control.PoolLimits{Max: 1, Slots: 1, IdleTimeout: time.Second, BootTimeout: 30 * time.Second}}, false)
	id := c.submit(t, "name: one\ncommand: [sleep, \"0.2\"]\nplacement: {residency: EU}\n")
	queuetest.Eventually(t, 60*time.Second, "the job to succeed", func() bool {
		j := c.job(t, id)
		return j != nil && j.State == queue.StateSucceeded
	})
	queuetest.Eventually(t, 30*time.Second, "zero live instances", func() bool { return len(c.live(t)) == 0 })
	all, err := c.s.Instances(context.Background(), "od", "")
	if err != nil || len(all) != 1 {
		t.Fatalf("instances of od: %v %v, want the one launched", all, err)
	}
	in := all[0]
	if in.State != queue.InstanceTerminated {
		t.Fatalf("instance %s ended %s (%s), want terminated", in.ID, in.State, in.Reason)
	}
	// Announced after each commit: wait for the last one.
	var recorded []queue.InstanceEvent
	queuetest.Eventually(t, 10*time.Second, "the instance's events announced", func() bool {
		evs, err := c.s.InstanceEvents(context.Background(), in.ID)
		if err != nil {
			t.Fatal(err)
		}
		recorded = evs
		return len(announced(t, c.n.JS, queue.InstanceSubject(in.Pool, in.ID))) >= len(evs)
	})
	sameAsRecorded(t, c.s, c.n.JS, in)
	var states []queue.InstanceState
	for _, ev := range recorded {
		states = append(states, ev.State)
	}
	want := []queue.InstanceState{queue.InstanceRequested, queue.InstancePending, queue.InstanceReady, queue.InstanceDraining, queue.InstanceTerminated}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Fatalf("instance %s went %v, want %v", in.ID, states, want)
	}
}

// movedNote returns the audit-trail message that says why the job moved.
func movedNote(t *testing.T, s *store.Store, id uuid.UUID) string {
	t.Helper()
	evs, err := s.EventsOf(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if len(e.Message) > 10 && e.Message[:10] == "moved from" {
			return e.Message
		}
	}
	return ""
}

func TestNoCapacityMovesWaitingJobsToPlanBInsideTheirResidency(t *testing.T) {
	t.Parallel()
	// spot-de is cheapest and chosen first; od-us is cheaper than od-de but
	// outside the jobs' residency.
	pools := []sim.PoolConfig{simPool("spot-de", "DE", "spot", "0.10"), simPool("od-de", "DE", "on-demand", "0.40"),
		simPool("od-us", "US", "on-demand", "0.20")}
	for i := range pools {
		pools[i].BootDelay = time.Millisecond
	}
	c := startScaled(t, pools, control.AutoscalerConfig{Interval: 200 * time.Millisecond,
		Defaults: control.PoolLimits{Max: 2, Slots: 2, IdleTimeout: time.Second, Backoff: time.Minute}}, false)
	// The first launch, spot-de's, finds no capacity.
	c.cloud.Fail(sim.OpLaunch, adapters.ErrCapacityUnavailable, 1, 0)
	var ids []uuid.UUID
	for i := range 3 {
		ids = append(ids, c.submit(t, fmt.Sprintf("name: eu%d\ncommand: [sleep, \"0.1\"]\nplacement: {residency: EU, tier: spot-then-on-demand}\n", i)))
	}
	queuetest.Eventually(t, 60*time.Second, "the jobs to succeed", func() bool {
		for _, id := range ids {
			if j := c.job(t, id); j == nil || j.State != queue.StateSucceeded {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		p, err := c.s.LatestPlacement(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if p.Pool != "od-de" || p.Version != 2 || p.Residency != "EU" {
			t.Fatalf("job %s ended on pool %s (placement %d, residency %q), want od-de, 2, EU", id, p.Pool, p.Version, p.Residency)
		}
		if note := movedNote(t, c.s, id); note == "" || !containsAll(note, "spot-de", "od-de", "no capacity") {
			t.Fatalf("job %s audit trail says %q, want the move and its reason", id, note)
		}
	}
	failed, err := c.s.Instances(context.Background(), "spot-de", queue.InstanceFailed)
	if err != nil || len(failed) != 1 {
		t.Fatalf("spot-de's failed launches: %v %v", failed, err)
	}
	if got := c.auto.Exhausted(time.Now()); got["spot-de"] == "" {
		t.Fatalf("spot-de not left alone after no capacity: %v", got)
	}
	// A server that takes the lead now (a restart, a failover) leaves the
	// pool alone too, for what is left of its back-off.
	successor := &control.Autoscaler{Providers: []control.InstanceProvider{c.provider}, Store: c.s, Workers: c.s, Exhaustions: c.s, JS: c.n.JS,
		Placer: c.placer, Config: c.auto.Config, Boot: c.auto.Boot, Logger: c.auto.Logger}
	if err := successor.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := successor.Exhausted(time.Now()); !strings.Contains(got["spot-de"], "no capacity") {
		t.Fatalf("a new leader must leave spot-de alone as recorded, got %v", got)
	}
}

func TestInstanceWhoseWorkerNeverBootsIsTerminatedAndItsJobsGoElsewhere(t *testing.T) {
	t.Parallel()
	slow, fast := simPool("slow", "DE", "on-demand", "0.10"), simPool("fast", "DE", "on-demand", "0.30")
	slow.BootDelay, fast.BootDelay = 24*time.Hour, time.Millisecond
	c := startScaled(t, []sim.PoolConfig{slow, fast}, control.AutoscalerConfig{Interval: 200 * time.Millisecond,
		Defaults: control.PoolLimits{Max: 1, IdleTimeout: time.Second, BootTimeout: 2 * time.Second, Backoff: time.Minute}}, false)
	id := c.submit(t, "name: waits\ncommand: [sleep, \"0.1\"]\n")
	queuetest.Eventually(t, 60*time.Second, "the job to succeed", func() bool {
		j := c.job(t, id)
		return j != nil && j.State == queue.StateSucceeded
	})
	if j := c.job(t, id); j.Pool != "fast" {
		t.Fatalf("job ran on %s, want fast", j.Pool)
	}
	if note := movedNote(t, c.s, id); !containsAll(note, "slow", "fast", "boot") {
		t.Fatalf("audit trail says %q, want the move off slow for its boot timeout", note)
	}
	queuetest.Eventually(t, 10*time.Second, "slow's instance to end", func() bool {
		ins, err := c.s.Instances(context.Background(), "slow", "")
		return err == nil && len(ins) == 1 && !ins[0].State.Live()
	})
	ins, _ := c.s.Instances(context.Background(), "slow", "")
	if in := ins[0]; in.State != queue.InstanceTerminated || !containsAll(in.Reason, "boot timeout") && !containsAll(in.Reason, "no ready worker") {
		t.Fatalf("slow's instance: %s %q", in.State, in.Reason)
	}
}

// muteImage is a machine image that boots the gpuq worker, except on pool's
// machines, which run and never start one: the provider reports them
// running, and no worker ever reports from them.
func muteImage(t *testing.T, pool string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "image")
	script := `#!/bin/sh
prev=
for a in "$@"; do
	if [ "$prev" = --pool ] && [ "$a" = ` + pool + ` ]; then exec sleep 3600; fi
	prev=$a
done
exec ` + gpuqBin(t) + ` "$@"
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// A machine the provider runs is not ready until its worker reports: one
// whose worker never does is released at the boot timeout, its pool is left
// alone for its back-off and its job goes elsewhere, where the instance whose
// worker reports turns ready and runs it.
func TestRunningMachineWhoseWorkerNeverReportsIsReleasedAtTheBootTimeoutAndCounted(t *testing.T) {
	t.Parallel()
	const bootTimeout = 4 * time.Second
	mute, talks := simPool("mute", "DE", "on-demand", "0.10"), simPool("talks", "DE", "on-demand", "0.30")
	mute.BootDelay, talks.BootDelay = time.Millisecond, time.Millisecond
	c := startScaledBooting(t, muteImage(t, "mute"), []sim.PoolConfig{mute, talks}, control.AutoscalerConfig{Interval: 200 * time.Millisecond,
		Defaults: control.PoolLimits{Max: 1, IdleTimeout: time.Second, BootTimeout: bootTimeout, PlacementTimeout: time.Hour, Backoff: time.Minute}}, false)
	ctx := context.Background()
	id := c.submit(t, "name: waits\ncommand: [sleep, \"0.1\"]\n")
	var muted *queue.Instance
	queuetest.Eventually(t, 30*time.Second, "mute's machine to run at the provider", func() bool {
		ins, err := c.s.Instances(ctx, "mute", "")
		if err != nil || len(ins) != 1 || ins[0].ProviderID == "" {
			return false
		}
		d, err := c.provider.Describe(ctx, ins[0].ProviderID)
		muted = ins[0]
		return err == nil && d.State == adapters.StateRunning
	})
	time.Sleep(time.Second) // five passes
	if in, err := c.s.Instance(ctx, muted.ID); err != nil || in.State != queue.InstancePending || in.ReadyAt != nil {
		t.Fatalf("mute's instance, running at the provider with no worker: %+v %v; want pending", in, err)
	}
	queuetest.Eventually(t, 60*time.Second, "the job to succeed", func() bool {
		j := c.job(t, id)
		return j != nil && j.State == queue.StateSucceeded
	})
	if j := c.job(t, id); j.Pool != "talks" {
		t.Fatalf("job ran on %s, want talks", j.Pool)
	}
	if note := movedNote(t, c.s, id); !containsAll(note, "mute", "talks", "boot") {
		t.Fatalf("audit trail says %q, want the move off mute for its boot timeout", note)
	}
	queuetest.Eventually(t, 10*time.Second, "mute's instance to end", func() bool {
		in, err := c.s.Instance(ctx, muted.ID)
		return err == nil && !in.State.Live()
	})
	in, _ := c.s.Instance(ctx, muted.ID)
	if in.State != queue.InstanceTerminated || !containsAll(in.Reason, "boot timeout", "worker never reported") {
		t.Fatalf("mute's instance ended %s with %q, want terminated for the boot timeout", in.State, in.Reason)
	}
	if in.ReadyAt != nil || in.WorkerSeenAt != nil {
		t.Fatalf("mute's instance was ready at %v, its worker seen at %v; want neither", in.ReadyAt, in.WorkerSeenAt)
	}
	if lived := in.EndedAt.Sub(*in.LaunchedAt); lived < bootTimeout {
		t.Fatalf("mute's instance lived %s, released before the boot timeout %s", lived, bootTimeout)
	}
	if got := c.auto.Exhausted(time.Now()); !containsAll(got["mute"], muted.ID, "boot timeout") {
		t.Fatalf("mute not counted against after the boot timeout: %v", got)
	}
	if n := c.cloud.Created(); n != 2 {
		t.Fatalf("the cloud rented %d machines, want 2 (mute's, then talks')", n)
	}
	// The job may finish before the pass that hears talks' worker records
	// the instance ready: the worker claims as soon as it is up.
	var up *queue.Instance
	queuetest.Eventually(t, 10*time.Second, "talks' instance to be recorded ready", func() bool {
		ins, err := c.s.Instances(ctx, "talks", "")
		if err != nil || len(ins) != 1 {
			return false
		}
		up = ins[0]
		return up.ReadyAt != nil && up.WorkerSeenAt != nil
	})
	if up.ReadyAt.Before(*up.WorkerSeenAt) {
		t.Fatalf("talks' instance ready at %v, its worker seen at %v; want ready once its worker was seen", up.ReadyAt, up.WorkerSeenAt)
	}
}

// An autoscaler that has only just started hearing beats (a server that
// took the lead, or got its NATS connection back) does not take a booting
// instance's silence for a dead worker: it releases the instance for its
// boot timeout only once it has listened long enough to hear a worker.
func TestFreshAutoscalerReleasesASilentInstanceOnlyAfterListeningForBeats(t *testing.T) {
	t.Parallel()
	pool := simPool("od", "DE", "on-demand", "0.10")
	pool.BootDelay = 24 * time.Hour // no worker ever reports
	c := startScaled(t, []sim.PoolConfig{pool}, control.AutoscalerConfig{}, true)
	ctx := context.Background()
	id := c.submit(t, "command: [/bin/true]\n")
	queuetest.Eventually(t, 20*time.Second, "the job to be placed", func() bool {
		j := c.job(t, id)
		return j != nil && j.State == queue.StatePlaced
	})
	boot := control.BootTemplate{NATSURL: c.n.Server.URL(), Credentials: control.IssuedCredentials{Issuer: c.n.Server.Issuer}}
	first := &control.Autoscaler{Providers: []control.InstanceProvider{c.provider}, Store: c.s, Workers: c.s, JS: c.n.JS,
		Placer: c.placer, Boot: boot, Logger: c.auto.Logger, Config: control.AutoscalerConfig{Defaults: control.PoolLimits{BootTimeout: time.Hour}}}
	if err := first.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	launched, err := c.s.Instances(ctx, "od", queue.InstancePending)
	if err != nil || len(launched) != 1 {
		t.Fatalf("pending instances after the first pass: %+v %v", launched, err)
	}
	// The next leader, with a boot timeout long past.
	next := &control.Autoscaler{Providers: []control.InstanceProvider{c.provider}, Store: c.s, Workers: c.s, NATS: c.n.NC,
		JS: c.n.JS, Placer: c.placer, Boot: boot, Logger: c.auto.Logger,
		Config: control.AutoscalerConfig{Defaults: control.PoolLimits{BootTimeout: time.Nanosecond, Backoff: time.Minute}}}
	if err := next.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if in, err := c.s.Instance(ctx, launched[0].ID); err != nil || in.State != queue.InstancePending {
		t.Fatalf("on the new leader's first pass the instance is %+v (%v); want still pending", in, err)
	}
	time.Sleep(2 * time.Second)
	if err := next.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if in, err := c.s.Instance(ctx, launched[0].ID); err != nil || in.State != queue.InstanceDraining || !containsAll(in.Reason, "boot timeout") {
		t.Fatalf("after listening 2s the instance is %+v (%v); want draining for its boot timeout", in, err)
	}
	if got := next.Exhausted(time.Now()); !containsAll(got["od"], "boot timeout") {
		t.Fatalf("od not counted against after the boot timeout: %v", got)
	}
}

// A booting instance turns ready as soon as its worker's first beat is
// heard, not at the autoscaler's next tick: here the tick is an hour away,
// and the instance is ready and its job done within seconds.
func TestABootingInstanceIsReadyAtItsWorkersFirstBeatNotAtTheNextTick(t *testing.T) {
	t.Parallel()
	pool := simPool("od", "DE", "on-demand", "0.10")
	pool.BootDelay = time.Millisecond
	c := startScaled(t, []sim.PoolConfig{pool}, control.AutoscalerConfig{}, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id := c.submit(t, "command: [/bin/true]\n")
	queuetest.Eventually(t, 20*time.Second, "the job to be placed", func() bool {
		j := c.job(t, id)
		return j != nil && j.State == queue.StatePlaced
	})
	auto := &control.Autoscaler{Providers: []control.InstanceProvider{c.provider}, Store: c.s, Workers: c.s, JS: c.n.JS, Placer: c.placer,
		Boot:   control.BootTemplate{NATSURL: c.n.Server.URL(), Credentials: control.IssuedCredentials{Issuer: c.n.Server.Issuer}},
		Logger: c.auto.Logger, Config: control.AutoscalerConfig{Interval: time.Hour}}
	done := make(chan error, 1)
	go func() { done <- auto.Run(ctx) }()
	queuetest.Eventually(t, 30*time.Second, "the instance to be ready and its job done, an hour before the next tick", func() bool {
		ready, err := c.s.Instances(ctx, "od", queue.InstanceReady)
		j := c.job(t, id)
		return err == nil && len(ready) == 1 && j != nil && j.State == queue.StateSucceeded
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A job that waits longer than its pool's placement timeout with no ready
// worker there (its machine still booting, well inside the boot timeout) is
// re-placed on its plan B, with the reason in its audit trail.
func TestJobWaitingPastThePlacementTimeoutOnAPoolWithNoSupplyIsReplaced(t *testing.T) {
	t.Parallel()
	slow, fast := simPool("slow", "DE", "on-demand", "0.10"), simPool("fast", "DE", "on-demand", "0.30")
	slow.BootDelay, fast.BootDelay = 24*time.Hour, time.Millisecond
	c := startScaled(t, []sim.PoolConfig{slow, fast}, control.AutoscalerConfig{Interval: 200 * time.Millisecond,
		Defaults: control.PoolLimits{Max: 1, IdleTimeout: time.Second, BootTimeout: time.Hour, PlacementTimeout: 2 * time.Second, Backoff: time.Minute}}, false)
	id := c.submit(t, "name: waits\ncommand: [sleep, \"0.1\"]\n")
	queuetest.Eventually(t, 60*time.Second, "the job to succeed", func() bool {
		j := c.job(t, id)
		return j != nil && j.State == queue.StateSucceeded
	})
	if j := c.job(t, id); j.Pool != "fast" {
		t.Fatalf("job ran on %s, want fast", j.Pool)
	}
	if note := movedNote(t, c.s, id); !containsAll(note, "slow", "fast", "no ready worker") {
		t.Fatalf("audit trail says %q, want the move off slow for the wait with no ready worker", note)
	}
	if got := c.auto.Exhausted(time.Now()); !containsAll(got["slow"], "no ready worker") {
		t.Fatalf("slow not left alone after the placement timeout: %v", got)
	}
}

// An instance whose canary quarantines its node is terminated, its pool is
// left alone for its back-off, and its waiting job goes to its plan B. The
// simulated machines have no GPU, so the canary's report is recorded as the
// worker service records a failing canary's.
func TestQuarantinedInstanceIsTerminatedAndCountedAgainstItsPool(t *testing.T) {
	t.Parallel()
	bad, good := simPool("bad", "DE", "on-demand", "0.10"), simPool("good", "DE", "on-demand", "0.30")
	bad.BootDelay, good.BootDelay = 24*time.Hour, time.Millisecond
	c := startScaled(t, []sim.PoolConfig{bad, good}, control.AutoscalerConfig{Interval: 200 * time.Millisecond,
		Defaults: control.PoolLimits{Max: 1, IdleTimeout: time.Second, BootTimeout: time.Hour, PlacementTimeout: time.Hour, Backoff: time.Minute}}, false)
	id := c.submit(t, "name: waits\ncommand: [sleep, \"0.1\"]\n")
	var launched *queue.Instance
	queuetest.Eventually(t, 30*time.Second, "an instance of bad to launch", func() bool {
		ins, err := c.s.Instances(context.Background(), "bad", queue.InstancePending)
		if err == nil && len(ins) == 1 {
			launched = ins[0]
		}
		return launched != nil
	})
	if _, _, err := c.s.RecordCanary(context.Background(), queue.CanaryRecord{NodeID: launched.ID, Pool: "bad", Host: "h",
		Summary: "ecc: 3 uncorrectable errors", Quarantine: true, Reason: "uncorrectable ECC errors"}); err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, 60*time.Second, "the job to succeed", func() bool {
		j := c.job(t, id)
		return j != nil && j.State == queue.StateSucceeded
	})
	if j := c.job(t, id); j.Pool != "good" {
		t.Fatalf("job ran on %s, want good", j.Pool)
	}
	if note := movedNote(t, c.s, id); !containsAll(note, "bad", "good", "quarantined") {
		t.Fatalf("audit trail says %q, want the move off bad for the quarantine", note)
	}
	queuetest.Eventually(t, 10*time.Second, "bad's instance to end", func() bool {
		in, err := c.s.Instance(context.Background(), launched.ID)
		return err == nil && !in.State.Live()
	})
	if in, _ := c.s.Instance(context.Background(), launched.ID); !containsAll(in.Reason, "quarantined", "ECC") {
		t.Fatalf("bad's instance ended %s with %q, want the quarantine", in.State, in.Reason)
	}
	if got := c.auto.Exhausted(time.Now()); !containsAll(got["bad"], "quarantined") {
		t.Fatalf("bad not counted against after the quarantine: %v", got)
	}
	if got := c.cloud.Created(); got != 2 {
		t.Fatalf("the cloud rented %d machines, want 2 (bad's, then good's)", got)
	}
}

// An instance whose worker takes no work after host errors in a row (its
// machine fails jobs around their runs) is released once it runs none, and
// another machine of the pool takes its place: the pool is not left alone,
// since one machine's fault says nothing of the others, until a second
// machine fails alike within the pool's back-off. The simulated machines
// boot no worker here; the test beats as the instance's worker.
func TestAnInstanceWhoseWorkerPausesAfterHostErrorsIsReleasedAndReplaced(t *testing.T) {
	t.Parallel()
	pool := simPool("od", "DE", "on-demand", "0.10")
	pool.BootDelay = 24 * time.Hour
	c := startScaled(t, []sim.PoolConfig{pool}, control.AutoscalerConfig{Interval: 200 * time.Millisecond,
		Defaults: control.PoolLimits{Max: 2, IdleTimeout: time.Hour, BootTimeout: time.Hour, PlacementTimeout: time.Hour, Backoff: time.Minute}}, false)
	ctx := context.Background()
	id := c.submit(t, "name: waits\ncommand: [/bin/true]\n")
	var launched *queue.Instance
	queuetest.Eventually(t, 30*time.Second, "an instance of od to launch", func() bool {
		ins, err := c.s.Instances(ctx, "od", queue.InstancePending)
		if err == nil && len(ins) == 1 {
			launched = ins[0]
		}
		return launched != nil
	})
	beat := queue.Beat{BeatSender: queue.BeatSender{Worker: "worker-" + launched.ID, Node: launched.ID, Pool: "od"}}
	queuetest.Eventually(t, 30*time.Second, "the instance to be ready at its worker's beats", func() bool {
		publishBeat(t, c.n.NC, "od", beat)
		in, err := c.s.Instance(ctx, launched.ID)
		return err == nil && in.State == queue.InstanceReady
	})
	// Beating as a worker that takes work, it stays, the job waiting on it.
	for range 10 {
		publishBeat(t, c.n.NC, "od", beat)
		time.Sleep(queue.BeatInterval)
	}
	if in, err := c.s.Instance(ctx, launched.ID); err != nil || in.State != queue.InstanceReady {
		t.Fatalf("an instance whose worker takes work: %+v (%v), want ready", in, err)
	}
	// A paused worker still running a job (started before the host errors)
	// keeps its machine until the job is done.
	claim, err := c.s.Claim(ctx, queue.ClaimRequest{JobID: id, PlacementVersion: 1, Lease: time.Hour, WorkerID: beat.Worker, Host: "h", PID: 1,
		Pool: "od", Country: "DE", NodeID: launched.ID})
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(30 * time.Second)
	beat.PausedUntil, beat.PauseReason = &until, "preparing directories: mkdir /var/lib/gpuq/jobs/x: no space left on device"
	for range 10 {
		publishBeat(t, c.n.NC, "od", beat)
		time.Sleep(queue.BeatInterval)
	}
	if in, err := c.s.Instance(ctx, launched.ID); err != nil || in.State != queue.InstanceReady {
		t.Fatalf("an instance whose paused worker runs a job: %+v (%v), want ready", in, err)
	}
	if err := c.s.Requeue(ctx, id, claim.Job.Attempt, queue.OutcomeHostError, nil, "host error on h: preparing directories"); err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, 30*time.Second, "the paused worker's instance to be released", func() bool {
		publishBeat(t, c.n.NC, "od", beat)
		in, err := c.s.Instance(ctx, launched.ID)
		return err == nil && (in.State == queue.InstanceDraining || !in.State.Live())
	})
	if in, _ := c.s.Instance(ctx, launched.ID); !containsAll(in.Reason, "host errors in a row", "no space left on device") {
		t.Fatalf("the instance was released with %q, want the host errors and the last of them", in.Reason)
	}
	var second *queue.Instance
	queuetest.Eventually(t, 30*time.Second, "another machine of od to take its place", func() bool {
		ins, err := c.s.Instances(ctx, "od", queue.InstancePending)
		if err == nil && len(ins) == 1 && ins[0].ID != launched.ID {
			second = ins[0]
		}
		return second != nil
	})
	if got := c.auto.Exhausted(time.Now()); got["od"] != "" {
		t.Fatalf("od left alone after one machine's host errors: %q", got["od"])
	}
	// A second machine of the pool failing alike within its back-off says
	// the pool's machines do: the pool is left alone.
	beat.Worker, beat.Node = "worker-"+second.ID, second.ID
	queuetest.Eventually(t, 30*time.Second, "the second paused worker's instance to be released", func() bool {
		publishBeat(t, c.n.NC, "od", beat)
		in, err := c.s.Instance(ctx, second.ID)
		return err == nil && (in.State == queue.InstanceDraining || !in.State.Live())
	})
	if got := c.auto.Exhausted(time.Now()); !containsAll(got["od"], "second machine of the pool", "no space left on device") {
		t.Fatalf("od not left alone after a second machine's host errors: %q", got["od"])
	}
	if got := c.cloud.Created(); got != 2 {
		t.Fatalf("the cloud rented %d machines, want 2: a pool left alone launches none", got)
	}
}

// crashingLauncher rents the machine and then never records it, as a
// server killed between the provider's answer and its record.
type crashingLauncher struct {
	*sim.Provider
	crash context.CancelFunc
}

func (p crashingLauncher) Launch(ctx context.Context, req adapters.LaunchRequest) (adapters.Instance, error) {
	if _, err := p.Provider.Launch(ctx, req); err != nil {
		return adapters.Instance{}, err
	}
	p.crash()
	return adapters.Instance{}, context.Cause(ctx)
}

// startWithAPlacedJob starts a sim pool whose machines never boot a worker,
// with no autoscaler or reaper running, and places one job there; limits and
// boot are what the test's own autoscalers run with.
func startWithAPlacedJob(t *testing.T) (c *scaled, limits control.AutoscalerConfig, boot control.BootTemplate) {
	t.Helper()
	slowBoot := simPool("od", "DE", "on-demand", "0.10")
	slowBoot.BootDelay = 24 * time.Hour // no worker: the test is about the machine
	c = startScaled(t, []sim.PoolConfig{slowBoot}, control.AutoscalerConfig{}, true)
	id := c.submit(t, "command: [/bin/true]\n")
	queuetest.Eventually(t, 20*time.Second, "the job to be placed", func() bool {
		j := c.job(t, id)
		return j != nil && j.State == queue.StatePlaced
	})
	limits = control.AutoscalerConfig{Interval: time.Second, Defaults: control.PoolLimits{BootTimeout: time.Hour}}
	boot = control.BootTemplate{NATSURL: c.n.Server.URL(), Credentials: control.IssuedCredentials{Issuer: c.n.Server.Issuer}}
	return c, limits, boot
}

// cutOffLaunch runs one autoscaler pass that is cut off right after its
// launch: the instance is recorded as requested and its machine rented, as
// when the server stops before recording the launch.
func cutOffLaunch(ctx context.Context, c *scaled, limits control.AutoscalerConfig, boot control.BootTemplate) {
	crashCtx, crash := context.WithCancel(ctx)
	defer crash()
	first := &control.Autoscaler{Providers: []control.InstanceProvider{crashingLauncher{c.provider, crash}}, Store: c.s,
		Workers: c.s, JS: c.n.JS, Placer: c.placer, Config: limits, Boot: boot, Logger: c.auto.Logger}
	first.Pass(crashCtx) //nolint:errcheck // cut off on purpose
}

func TestLaunchCutOffBeforeItsRecordIsFinishedByTokenAndNothingLeaksOrRunsTwice(t *testing.T) {
	t.Parallel()
	c, limits, boot := startWithAPlacedJob(t)
	ctx := context.Background()
	cutOffLaunch(ctx, c, limits, boot)
	if n := c.cloud.Created(); n != 1 {
		t.Fatalf("the cloud rented %d machines, want 1", n)
	}
	recorded, err := c.s.Instances(ctx, "od", "")
	if err != nil || len(recorded) != 1 || recorded[0].State != queue.InstanceRequested {
		t.Fatalf("after the cut-off launch the table holds %+v (%v); want one requested instance", recorded, err)
	}
	// The restarted server: a reaper pass first, then the autoscaler.
	reaped, err := c.reaper.Pass(ctx)
	if err != nil || len(reaped) != 0 {
		t.Fatalf("reaper on a launch recorded as requested: %+v %v; want it left to the autoscaler", reaped, err)
	}
	second := &control.Autoscaler{Providers: []control.InstanceProvider{c.provider}, Store: c.s, Workers: c.s, JS: c.n.JS,
		Placer: c.placer, Config: limits, Boot: boot, Logger: c.auto.Logger}
	for range 2 {
		if err := second.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.cloud.Created(); n != 1 {
		t.Fatalf("after the restart the cloud rented %d machines, want still 1", n)
	}
	got, err := c.s.Instance(ctx, recorded[0].ID)
	if err != nil || got.State != queue.InstancePending || got.ProviderID == "" {
		t.Fatalf("the cut-off launch is recorded as %+v (%v); want pending with its provider id", got, err)
	}

	// A machine billed with gpuq's tags that the table does not know (its
	// record lost with a database restore, say) is terminated and reported.
	stray, err := c.provider.Launch(ctx, adapters.LaunchRequest{Pool: "od", ClientToken: "stray-1", Boot: adapters.BootSpec{
		InstanceID: "stray-1", Pool: "od", Region: "r-od", Country: "DE", NATSURL: c.n.Server.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	reaped, err = c.reaper.Pass(ctx)
	if err != nil || len(reaped) != 1 || reaped[0].ProviderID != stray.ProviderID || reaped[0].Action != "terminated" {
		t.Fatalf("reaper: %+v %v; want the stray machine terminated", reaped, err)
	}
	if d, err := c.provider.Describe(ctx, stray.ProviderID); err != nil || !d.State.Gone() && d.State != adapters.StateStopping {
		t.Fatalf("stray machine after the reaper: %+v %v", d, err)
	}

	// A machine gpuq recorded as terminated that the provider still bills
	// (its terminate call lost, say) is terminated again and reported.
	ghost, err := c.s.RecordInstance(ctx, queue.NewInstance{ID: "ghost-1", Provider: c.provider.Name(), Pool: "od", ClientToken: "ghost-1", Slots: 1, Currency: "EUR", Billing: queue.BillPerSecond})
	if err != nil {
		t.Fatal(err)
	}
	billed, err := c.provider.Launch(ctx, adapters.LaunchRequest{Pool: "od", ClientToken: "ghost-1", Boot: adapters.BootSpec{
		InstanceID: ghost.ID, Pool: "od", Region: "r-od", Country: "DE", NATSURL: c.n.Server.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.s.ChangeInstance(ctx, queue.InstanceChange{ID: ghost.ID, From: []queue.InstanceState{queue.InstanceRequested},
		To: queue.InstanceTerminated, ProviderID: billed.ProviderID, Reason: "terminated by the test"}); err != nil {
		t.Fatal(err)
	}
	reaped, err = c.reaper.Pass(ctx)
	if err != nil || len(reaped) != 1 || reaped[0].ProviderID != billed.ProviderID || reaped[0].Action != "terminated" ||
		!containsAll(reaped[0].Reason, "recorded as terminated") {
		t.Fatalf("reaper: %+v %v; want the machine recorded as terminated terminated again", reaped, err)
	}
	if d, err := c.provider.Describe(ctx, billed.ProviderID); err != nil || !d.State.Gone() && d.State != adapters.StateStopping {
		t.Fatalf("machine recorded as terminated, after the reaper: %+v %v", d, err)
	}

	// A recorded instance the provider no longer has is closed with the reason.
	if err := c.provider.Terminate(ctx, got.ProviderID); err != nil {
		t.Fatal(err)
	}
	reaper := *c.reaper
	reaper.Grace = time.Nanosecond
	queuetest.Eventually(t, 10*time.Second, "the reaper to close the vanished instance", func() bool {
		if _, err := reaper.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		in, err := c.s.Instance(ctx, got.ID)
		return err == nil && !in.State.Live()
	})
	closed, _ := c.s.Instance(ctx, got.ID)
	if closed.State != queue.InstancePreempted || !containsAll(closed.Reason, "no longer lists") {
		t.Fatalf("vanished instance recorded as %s %q", closed.State, closed.Reason)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func TestProjectBoundsHoldBackLaunchesForThatProjectOnly(t *testing.T) {
	t.Parallel()
	pool := simPool("od", "DE", "on-demand", "0.10")
	pool.BootDelay = 24 * time.Hour // no worker: the test is about launches
	c := startScaled(t, []sim.PoolConfig{pool}, control.AutoscalerConfig{}, true)
	ctx := context.Background()
	var ids []uuid.UUID
	for i, project := range []string{"capped", "capped", "capped", "free"} {
		ids = append(ids, c.submit(t, fmt.Sprintf("name: j%d\nproject: %s\ncommand: [/bin/true]\n", i, project)))
	}
	queuetest.Eventually(t, 20*time.Second, "the jobs to be placed", func() bool {
		for _, id := range ids {
			if j := c.job(t, id); j == nil || j.State != queue.StatePlaced {
				return false
			}
		}
		return true
	})
	auto := &control.Autoscaler{Providers: []control.InstanceProvider{c.provider}, Store: c.s, Workers: c.s, JS: c.n.JS,
		Placer: c.placer, Boot: control.BootTemplate{NATSURL: c.n.Server.URL(), Credentials: control.IssuedCredentials{Issuer: c.n.Server.Issuer}}, Logger: c.auto.Logger,
		Config: control.AutoscalerConfig{Defaults: control.PoolLimits{Max: 10, BootTimeout: time.Hour},
			Projects: map[string]control.ProjectLimits{"capped": {MaxInstances: 1, MaxSpendPerHour: "1 EUR"}}}}
	for range 2 {
		if err := auto.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	perProject := map[string]int{}
	for _, in := range c.live(t) {
		perProject[in.Project]++
	}
	if perProject["capped"] != 1 || perProject["free"] != 1 || len(perProject) != 2 {
		t.Fatalf("live instances per project %v, want capped 1 (its bound), free 1", perProject)
	}
}

// launchAfterSnapshot is the instance table with an autoscaler's launch
// landing right after the reaper has read its live instances: the record
// and the machine both appear between the reaper's two reads.
type launchAfterSnapshot struct {
	control.ReaperStore
	launch func()
}

func (s launchAfterSnapshot) LiveInstances(ctx context.Context) ([]*queue.Instance, error) {
	live, err := s.ReaperStore.LiveInstances(ctx)
	s.launch()
	return live, err
}

func TestReaperLeavesALaunchRecordedAfterItReadTheTable(t *testing.T) {
	t.Parallel()
	c, limits, boot := startWithAPlacedJob(t)
	ctx := context.Background()
	// The launch records the instance as requested and rents the machine;
	// the reaper runs before the autoscaler records it as pending.
	reaper := *c.reaper
	reaper.Store = launchAfterSnapshot{ReaperStore: c.s, launch: func() { cutOffLaunch(ctx, c, limits, boot) }}
	reaped, err := reaper.Pass(ctx)
	if n := c.cloud.Created(); n != 1 {
		t.Fatalf("the cloud rented %d machines, want 1", n)
	}
	if err != nil || len(reaped) != 0 {
		t.Fatalf("reaper on a launch recorded after it read the table: %+v %v; want it left to the autoscaler", reaped, err)
	}
	recorded, err := c.s.Instances(ctx, "od", "")
	if err != nil || len(recorded) != 1 || recorded[0].State != queue.InstanceRequested {
		t.Fatalf("the table holds %+v (%v); want one requested instance", recorded, err)
	}
	listed, err := c.provider.Instances(ctx, adapters.InstanceFilter{})
	if err != nil || len(listed) != 1 || listed[0].State.Gone() || listed[0].State == adapters.StateStopping {
		t.Fatalf("the machine after the reaper: %+v %v; want it running", listed, err)
	}
}

// racingWorkers reads the workers' activity for a pass and then, before
// the pass goes on, runs between: what happens while the query's answer is
// on its way.
type racingWorkers struct {
	*store.Store
	between func()
}

func (w *racingWorkers) WorkerActivity(ctx context.Context, ids []string) (map[string]queue.WorkerActivity, error) {
	act, err := w.Store.WorkerActivity(ctx, ids)
	if w.between != nil {
		w.between()
		w.between = nil
	}
	return act, err
}

func TestAPassDoesNotReleaseAMachineWhoseWorkerPausedAfterClaimingAJob(t *testing.T) {
	t.Parallel()
	c, limits, boot := startWithAPlacedJob(t)
	ctx := context.Background()
	workers := &racingWorkers{Store: c.s}
	a := &control.Autoscaler{Providers: []control.InstanceProvider{c.provider}, Store: c.s, Workers: workers, JS: c.n.JS,
		Placer: c.placer, Config: limits, Boot: boot, Logger: c.auto.Logger}
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	launched, err := c.s.Instances(ctx, "od", queue.InstancePending)
	if err != nil || len(launched) != 1 {
		t.Fatalf("after a pass with a job placed: %+v (%v), want one pending instance", launched, err)
	}
	in := launched[0]
	beat := queue.Beat{BeatSender: queue.BeatSender{Worker: "worker-" + in.ID, Node: in.ID, Pool: "od"}}
	queuetest.Eventually(t, 30*time.Second, "the instance to be ready at its worker's beats", func() bool {
		publishBeat(t, c.n.NC, "od", beat)
		if err := a.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := c.s.Instance(ctx, in.ID)
		return err == nil && got.State == queue.InstanceReady
	})
	jobs, err := c.s.List(ctx, queue.ListFilter{})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("jobs: %+v (%v), want the one placed", jobs, err)
	}
	// While the pass's activity query answers "no job", the worker claims
	// the job, fails host errors in a row around other work and says it
	// pauses: the pass must not pair the old activity with the new beat.
	workers.between = func() {
		if _, err := c.s.Claim(ctx, queue.ClaimRequest{JobID: jobs[0].ID, PlacementVersion: 1, Lease: time.Hour, WorkerID: beat.Worker,
			Host: "h", PID: 1, Pool: "od", Country: "DE", NodeID: in.ID}); err != nil {
			t.Error(err)
			return
		}
		until := time.Now().Add(time.Minute)
		beat.PausedUntil, beat.PauseReason = &until, "preparing directories: no space left on device"
		publishBeat(t, c.n.NC, "od", beat)
		if err := c.n.NC.Flush(); err != nil {
			t.Error(err)
		}
		time.Sleep(500 * time.Millisecond) // time for the autoscaler's subscription to hear it
	}
	for range 2 {
		if err := a.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		if got, err := c.s.Instance(ctx, in.ID); err != nil || got.State != queue.InstanceReady {
			t.Fatalf("a machine whose paused worker runs a job: %+v (%v), want ready", got, err)
		}
	}
}
