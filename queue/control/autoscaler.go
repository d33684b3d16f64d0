package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
)

// InstanceProvider is what the autoscaler needs from a provider adapter:
// its offers (which pools it serves, at what price), launches by client
// token, and reading and releasing the instances it launched.
type InstanceProvider interface {
	adapters.OfferSource
	adapters.Launcher
	adapters.Describer
	adapters.Terminator
}

// AutoscalerStore is what the autoscaler needs from the system of record:
// the instance table, the demand per pool, and what re-placing a job needs.
type AutoscalerStore interface {
	RecordInstance(ctx context.Context, n queue.NewInstance) (*queue.Instance, error)
	ChangeInstance(ctx context.Context, c queue.InstanceChange) (*queue.Instance, error)
	SetWorkerSeen(ctx context.Context, id string, at time.Time) error
	LiveInstances(ctx context.Context) ([]*queue.Instance, error)
	LaunchesSince(ctx context.Context, pool string, since time.Time) (int, error)
	PoolDemand(ctx context.Context) ([]queue.PoolDemand, error)
	WaitingInPool(ctx context.Context, pool string, limit int) ([]uuid.UUID, error)
	NoteJob(ctx context.Context, id uuid.UUID, message string) error
	Job(ctx context.Context, id uuid.UUID) (*queue.Job, error)
	LatestPlacement(ctx context.Context, id uuid.UUID) (*queue.Placement, error)
	Attempts(ctx context.Context, id uuid.UUID) ([]queue.Attempt, error)
	CommitPlacements(ctx context.Context, d queue.Decided) ([]queue.PlacedJob, error)
}

// WorkerWatch tells the control plane what the instances' workers are
// doing: their running jobs, their latest activity and their canary record.
// The store answers it from what workers write to PostgreSQL today; the
// worker service can answer it from what workers report over NATS.
type WorkerWatch interface {
	WorkerActivity(ctx context.Context, instanceIDs []string) (map[string]queue.WorkerActivity, error)
}

// PoolLimits bound one pool's instances. A zero field takes the value of
// AutoscalerConfig.Defaults, then the default documented here.
type PoolLimits struct {
	// Min instances kept running even without work. Default 0.
	Min int `mapstructure:"min" json:"min"`
	// Max instances at once. Default 4.
	Max int `mapstructure:"max" json:"max"`
	// Slots is each instance's worker --slots: the jobs it runs at once.
	// Default 1.
	Slots int `mapstructure:"slots" json:"slots"`
	// MaxLaunchesPerMinute bounds launches requested in any minute.
	// Default 10.
	MaxLaunchesPerMinute int `mapstructure:"max_launches_per_minute" json:"max_launches_per_minute"`
	// MaxSpendPerHour bounds the summed hourly price of the pool's live
	// instances, as "amount CUR" in the offer's currency. Default: none.
	MaxSpendPerHour string `mapstructure:"max_spend_per_hour" json:"max_spend_per_hour"`
	// IdleTimeout is how long a worker may take no job before its instance
	// is released. Default 5m.
	IdleTimeout time.Duration `mapstructure:"idle_timeout" json:"idle_timeout"`
	// BootTimeout is how long an instance may take from launch to a ready
	// worker (one heard from: a beat, a claim, a canary report) before it is
	// released and counted against the pool, whatever the provider says of
	// the machine. Default 10m.
	BootTimeout time.Duration `mapstructure:"boot_timeout" json:"boot_timeout"`
	// Backoff is how long a pool that had no capacity (or an instance that
	// timed out booting or was quarantined) is left alone: no launches, and
	// its waiting jobs are re-placed on their plan B. Default 5m.
	Backoff time.Duration `mapstructure:"backoff" json:"backoff"`
	// PlacementTimeout is how long a job may wait on a pool with no ready
	// worker before it is re-placed. Default 10m.
	PlacementTimeout time.Duration `mapstructure:"placement_timeout" json:"placement_timeout"`
	// Billing is the unit the provider rounds an instance's billed time up
	// to: second or hour. Default second.
	Billing queue.Billing `mapstructure:"billing" json:"billing"`
}

// ProjectLimits bound the instances launched for one project's waiting
// jobs, across pools.
type ProjectLimits struct {
	// MaxInstances live at once for the project; 0: no bound.
	MaxInstances int `mapstructure:"max_instances" json:"max_instances"`
	// MaxSpendPerHour bounds the summed hourly price of those instances, as
	// "amount CUR" in their currency; empty: no bound.
	MaxSpendPerHour string `mapstructure:"max_spend_per_hour" json:"max_spend_per_hour"`
}

// AutoscalerConfig is the autoscaler's configuration (config key
// `autoscaler`).
type AutoscalerConfig struct {
	// Interval between passes. Default 5s.
	Interval time.Duration `mapstructure:"interval" json:"interval"`
	// Defaults apply to every pool; Pools override them per pool.
	Defaults PoolLimits            `mapstructure:"defaults" json:"defaults"`
	Pools    map[string]PoolLimits `mapstructure:"pools" json:"pools"`
	// Projects bound the instances launched for each project's jobs; a
	// launch is for the project with the most jobs waiting in the pool
	// that its bounds still allow.
	Projects map[string]ProjectLimits `mapstructure:"projects" json:"projects"`
}

// builtinLimits are PoolLimits' documented defaults.
var builtinLimits = PoolLimits{Max: 4, Slots: 1, MaxLaunchesPerMinute: 10, IdleTimeout: 5 * time.Minute,
	BootTimeout: 10 * time.Minute, Backoff: 5 * time.Minute, PlacementTimeout: 10 * time.Minute, Billing: queue.BillPerSecond}

// WithDefaults returns c with every unset default filled in; each pool's
// zero fields come from Defaults, whose zero fields come from the built-in
// defaults.
func (c AutoscalerConfig) WithDefaults() AutoscalerConfig {
	if c.Interval == 0 {
		c.Interval = 5 * time.Second
	}
	c.Defaults = c.Defaults.over(builtinLimits)
	pools := make(map[string]PoolLimits, len(c.Pools))
	for name, l := range c.Pools {
		pools[name] = l.over(c.Defaults)
	}
	c.Pools = pools
	return c
}

// Limits returns pool's limits with every default filled in.
func (c AutoscalerConfig) Limits(pool string) PoolLimits {
	c = c.WithDefaults()
	if l, ok := c.Pools[pool]; ok {
		return l
	}
	return c.Defaults
}

// over fills l's zero fields from d.
func (l PoolLimits) over(d PoolLimits) PoolLimits {
	if l.Min == 0 {
		l.Min = d.Min
	}
	if l.Max == 0 {
		l.Max = d.Max
	}
	if l.Slots == 0 {
		l.Slots = d.Slots
	}
	if l.MaxLaunchesPerMinute == 0 {
		l.MaxLaunchesPerMinute = d.MaxLaunchesPerMinute
	}
	if l.MaxSpendPerHour == "" {
		l.MaxSpendPerHour = d.MaxSpendPerHour
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.BootTimeout == 0 {
		l.BootTimeout = d.BootTimeout
	}
	if l.Backoff == 0 {
		l.Backoff = d.Backoff
	}
	if l.PlacementTimeout == 0 {
		l.PlacementTimeout = d.PlacementTimeout
	}
	if l.Billing == "" {
		l.Billing = d.Billing
	}
	return l
}

// Validate checks the configuration after WithDefaults, naming the field at
// fault.
func (c AutoscalerConfig) Validate() error {
	if c.Interval < 10*time.Millisecond {
		return fmt.Errorf("autoscaler.interval: must be at least 10ms, got %s", c.Interval)
	}
	if err := c.Defaults.validate("autoscaler.defaults"); err != nil {
		return err
	}
	names := make([]string, 0, len(c.Pools))
	for name := range c.Pools {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !policy.ValidPool(name) {
			return fmt.Errorf("autoscaler.pools: %q must match ^[A-Za-z0-9_-]+$", name)
		}
		if err := c.Pools[name].validate("autoscaler.pools." + name); err != nil {
			return err
		}
	}
	projects := make([]string, 0, len(c.Projects))
	for name := range c.Projects {
		projects = append(projects, name)
	}
	slices.Sort(projects)
	for _, name := range projects {
		p, key := c.Projects[name], "autoscaler.projects."+name
		if p.MaxInstances < 0 {
			return fmt.Errorf("%s.max_instances: must be 0 (no bound) or more, got %d", key, p.MaxInstances)
		}
		if p.MaxSpendPerHour != "" {
			if _, err := policy.ParseMoney(p.MaxSpendPerHour); err != nil {
				return fmt.Errorf("%s.max_spend_per_hour: %w", key, err)
			}
		}
	}
	return nil
}

func (l PoolLimits) validate(key string) error {
	switch {
	case l.Min < 0:
		return fmt.Errorf("%s.min: must not be negative, got %d", key, l.Min)
	case l.Max < 1 || l.Max > 10000:
		return fmt.Errorf("%s.max: must be 1–10000, got %d", key, l.Max)
	case l.Min > l.Max:
		return fmt.Errorf("%s.min: %d is more than max %d", key, l.Min, l.Max)
	case l.Slots < 1 || l.Slots > 256:
		return fmt.Errorf("%s.slots: must be 1–256, got %d", key, l.Slots)
	case l.MaxLaunchesPerMinute < 1:
		return fmt.Errorf("%s.max_launches_per_minute: must be at least 1, got %d", key, l.MaxLaunchesPerMinute)
	case l.IdleTimeout <= 0:
		return fmt.Errorf("%s.idle_timeout: must be positive, got %s", key, l.IdleTimeout)
	case l.BootTimeout <= 0:
		return fmt.Errorf("%s.boot_timeout: must be positive, got %s", key, l.BootTimeout)
	case l.Backoff <= 0:
		return fmt.Errorf("%s.backoff: must be positive, got %s", key, l.Backoff)
	case l.PlacementTimeout <= 0:
		return fmt.Errorf("%s.placement_timeout: must be positive, got %s", key, l.PlacementTimeout)
	case l.Billing != queue.BillPerSecond && l.Billing != queue.BillPerHour:
		return fmt.Errorf("%s.billing: must be second or hour, got %q", key, l.Billing)
	}
	if l.MaxSpendPerHour != "" {
		if _, err := policy.ParseMoney(l.MaxSpendPerHour); err != nil {
			return fmt.Errorf("%s.max_spend_per_hour: %w", key, err)
		}
	}
	return nil
}

// BootTemplate is what every launched worker is given besides its pool:
// where NATS is and extra `gpuq worker` flags.
type BootTemplate struct {
	NATSURL    string
	WorkerArgs []string
	// Executable is the gpuq binary on the machine; default the adapters'.
	Executable string
	// Credentials gives each machine its NATS credential, scoped to its
	// pool: IssuedCredentials (one per machine, where gpuq runs the NATS
	// server) or PoolPasswords (a deployment's static users); nil launches
	// machines without one.
	Credentials WorkerCredentials
}

// WorkerCredentials issues the NATS credential of one launched machine.
type WorkerCredentials interface {
	WorkerCredential(pool, region, instanceID string) (adapters.Secret, error)
}

// IssuedCredentials are credentials the control plane issues itself: a
// worker credential per machine, scoped to the machine's pool and region,
// which the NATS server checks against the issuer's key (queue.CredentialIssuer).
type IssuedCredentials struct {
	Issuer *queue.CredentialIssuer
}

// PoolPasswords are the credentials of a deployment whose NATS server holds
// static users (deploy/nats/auth.conf, from `gpuq nats-auth`): every machine
// of a pool gets the pool's worker user, worker.<pool>.<region>, with the
// password the server's environment holds under the same variable the NATS
// configuration reads (queue.PasswordVariable; there the NATS server may
// hold its bcrypt hash, here gpuq needs the plain one).
//
// A pool whose variable is unset gets no credential in the boot spec: its
// machine image must carry one (or the NATS server has no users).
type PoolPasswords struct {
	// Lookup reads a variable; os.LookupEnv in gpuq server.
	Lookup func(name string) (string, bool)
}

// WorkerCredential is the credential of pool's worker user in region.
func (c PoolPasswords) WorkerCredential(pool, region, _ string) (adapters.Secret, error) {
	user := queue.RoleUser(queue.RoleWorker, pool, region)
	name := queue.PasswordVariable(user)
	pw, ok := c.Lookup(name)
	if !ok || pw == "" {
		return adapters.Secret{}, nil
	}
	cred, err := queue.ParseNATSCredential(user + ":" + pw)
	if err != nil {
		return adapters.Secret{}, fmt.Errorf("%s: %w", name, err)
	}
	return adapters.NewSecret(cred.String()), nil
}

// WorkerCredential issues the credential of instanceID of pool in region.
func (c IssuedCredentials) WorkerCredential(pool, region, instanceID string) (adapters.Secret, error) {
	cred, err := c.Issuer.IssueWorker(pool, region, instanceID)
	if err != nil {
		return adapters.Secret{}, fmt.Errorf("issuing the NATS credential of instance %s: %w", instanceID, err)
	}
	return adapters.NewSecret(cred.String()), nil
}

// Autoscaler rents machines when a pool has work and releases them when it
// has none. Each pass it reads the demand per pool (jobs placed and not yet
// claimed, jobs running) and the supply (instances launching, workers idle
// or busy), launches through the pool's provider within the pool's and the
// project's bounds, and releases instances whose worker stayed idle for the
// pool's idle timeout, whose worker was never heard from within the boot
// timeout or was quarantined by its canary, and those whose worker, running
// no job, takes no work after host errors in a row. An instance is ready once its
// worker is heard from (its beats name the instance), not when the provider
// reports the machine running: a machine that runs without a worker serves
// no job. A pool with no capacity is left alone for its back-off and its
// waiting jobs go to their plan B. Every launch is recorded
// with its client token before the provider is asked, so a crash between
// the two is finished by the next pass with the same token and never rents
// a second machine.
type Autoscaler struct {
	Providers []InstanceProvider
	Store     AutoscalerStore
	Workers   WorkerWatch
	JS        RunPublisher
	// NATS is where the workers' liveness beats are heard, which turn an
	// instance ready; default the connection of JS when it has one (a
	// jetstream.JetStream does).
	NATS   BeatConn
	Placer Placer
	Boot   BootTemplate
	Config AutoscalerConfig
	// Pools, when set, records each launch and each refusal for lack of
	// capacity in the pools' shared availability history.
	Pools PoolEventRecorder
	// Exhaustions, when set, keeps the pools left alone for their back-off
	// in PostgreSQL: a server that takes the lead (a restart, a failover)
	// reads them on its first pass and does not launch into them again.
	Exhaustions ExhaustionStore
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time

	mu sync.Mutex
	// exhausted holds, per pool, until when it is left alone and why;
	// exhaustionsRead says whether those recorded before this autoscaler
	// were read.
	exhausted       map[string]exhaustion
	exhaustionsRead bool
	// pausedReleases holds, per pool, when it last released an instance
	// whose worker paused after host errors.
	pausedReleases map[string]time.Time
	// beats hears the workers' beats from the first pass on.
	beats *beatListener
	// wake asks Run for a pass before its next tick: the first beat of a
	// booting instance's worker, so that the instance is ready (and its
	// pool's supply counted) as soon as its worker is up.
	wake chan struct{}
}

// ExhaustionStore keeps the pools the autoscaler leaves alone.
type ExhaustionStore interface {
	RecordExhaustion(ctx context.Context, e queue.PoolExhaustion) error
	Exhaustions(ctx context.Context, at time.Time) ([]queue.PoolExhaustion, error)
}

type exhaustion struct {
	until  time.Time
	at     time.Time
	reason string
}

// poolOffer is a pool one of the providers serves, with its offer.
type poolOffer struct {
	provider InstanceProvider
	offer    policy.Offer
}

// seenEvery is how stale an instance's recorded worker_seen_at may grow
// while its worker keeps beating: the record says that the worker came up
// and roughly when it was last heard, without a write every pass.
const seenEvery = time.Minute

func (a *Autoscaler) settings() (AutoscalerConfig, *slog.Logger, func() time.Time, error) {
	cfg := a.Config.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return cfg, nil, nil, err
	}
	switch {
	case a.Store == nil:
		return cfg, nil, nil, errors.New("autoscaler.store: must be set")
	case a.Workers == nil:
		return cfg, nil, nil, errors.New("autoscaler.workers: must be set")
	case a.JS == nil:
		return cfg, nil, nil, errors.New("autoscaler.js: must be set")
	case a.Placer == nil:
		return cfg, nil, nil, errors.New("autoscaler.placer: must be set")
	case a.beatConn() == nil:
		return cfg, nil, nil, errors.New("autoscaler.nats: must be set (the workers' beats say which instances are ready) unless js has a Conn")
	}
	logger, now := a.Logger, a.Now
	if logger == nil {
		logger = slog.Default()
	}
	if now == nil {
		now = time.Now
	}
	return cfg, logger, now, nil
}

// beatConn is NATS, else JS's connection.
func (a *Autoscaler) beatConn() BeatConn {
	if a.NATS != nil {
		return a.NATS
	}
	if c, ok := a.JS.(interface{ Conn() *nats.Conn }); ok && c.Conn() != nil {
		return c.Conn()
	}
	return nil
}

// listening starts hearing beats on the first call; it returns the latest
// beat heard from each live instance's workers, as they stand now, and
// whether it has listened long enough for a booting instance's silence to
// count.
func (a *Autoscaler) listening(logger *slog.Logger, now func() time.Time, live []*queue.Instance) (map[heardFrom]heardBeat, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	conn := a.beatConn()
	if a.beats == nil {
		l, err := listen(conn, now, a.wake, logger)
		if err != nil {
			return nil, false, err
		}
		a.beats = l
	}
	ids := make(map[string]bool, len(live))
	booting := map[string]bool{}
	for _, in := range live {
		ids[in.ID] = true
		if in.State == queue.InstancePending {
			booting[in.ID] = true
		}
	}
	heard, long := a.beats.pass(conn, now(), ids, booting)
	return heard, long, nil
}

// expectBoot has the first beat of instance id's worker wake Run for a
// pass, before the instance is launched, so that no beat comes first.
func (a *Autoscaler) expectBoot(id string) {
	a.mu.Lock()
	l := a.beats
	a.mu.Unlock()
	if l != nil {
		l.expect(id)
	}
}

// stopListening stops hearing beats; the next pass starts again.
func (a *Autoscaler) stopListening() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.beats != nil {
		a.beats.stop()
		a.beats = nil
	}
}

// Run passes every Interval until ctx ends.
func (a *Autoscaler) Run(ctx context.Context) error {
	cfg, logger, _, err := a.settings()
	if err != nil {
		return err
	}
	defer a.stopListening()
	a.mu.Lock()
	if a.wake == nil {
		a.wake = make(chan struct{}, 1)
	}
	wake := a.wake
	a.mu.Unlock()
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		if err := a.Pass(ctx); err != nil && ctx.Err() == nil {
			logger.Warn("autoscaling", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-wake:
		}
	}
}

// Pass looks at every live instance and every pool's demand once, and
// launches, releases and re-places as they call for.
func (a *Autoscaler) Pass(ctx context.Context) error {
	cfg, logger, now, err := a.settings()
	if err != nil {
		return err
	}
	a.readExhaustions(ctx, logger, now())
	pools, errOffers := a.pools(ctx)
	a.observePools(ctx, logger, now(), pools)
	live, err := a.Store.LiveInstances(ctx)
	if err != nil {
		return err
	}
	ids := make([]string, len(live))
	for i, in := range live {
		ids[i] = in.ID
	}
	// The beats are taken before the activity: a worker's job is claimed
	// before the beat that says the worker pauses, so a paused worker's
	// job is among the activity read after it, and its machine is not
	// released under it.
	beats, heardLong, err := a.listening(logger, now, live)
	if err != nil {
		return err
	}
	activity, err := a.Workers.WorkerActivity(ctx, ids)
	if err != nil {
		return err
	}
	byPool := map[string][]*queue.Instance{}
	var errs []error
	for _, in := range live {
		beat := beats[heardFrom{in.ID, in.Pool}]
		w := workerSign{WorkerActivity: activity[in.ID], beat: beat.at, paused: beat.paused, pauseReason: beat.reason, heardLong: heardLong}
		in, err := a.watch(ctx, cfg, logger, now(), pools, in, w)
		if err != nil {
			errs = append(errs, err)
		}
		if in != nil && in.State.Live() {
			byPool[in.Pool] = append(byPool[in.Pool], in)
		}
	}
	demand, err := a.Store.PoolDemand(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	wanted := map[string]queue.PoolDemand{}
	for _, d := range demand {
		wanted[d.Pool] = d
	}
	names := make([]string, 0, len(pools))
	for name := range pools {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := a.scalePool(ctx, cfg, logger, now(), pools[name], wanted[name], byPool, activity); err != nil {
			errs = append(errs, fmt.Errorf("pool %s: %w", name, err))
		}
	}
	// Jobs waiting on a pool that no provider offers have no supply at all.
	for _, d := range demand {
		if _, ok := pools[d.Pool]; ok || d.Waiting == 0 || errOffers != nil {
			continue
		}
		if l := cfg.Limits(d.Pool); now().Sub(d.OldestWaiting) >= l.PlacementTimeout {
			reason := fmt.Sprintf("no provider offers pool %s", d.Pool)
			a.exhaust(ctx, logger, d.Pool, now(), l.Backoff, reason)
			if err := a.replaceWaiting(ctx, logger, now(), d.Pool, reason); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(append(errs, errOffers)...)
}

// pools maps every pool the providers offer to its provider and offer.
func (a *Autoscaler) pools(ctx context.Context) (map[string]poolOffer, error) {
	out := map[string]poolOffer{}
	var errs []error
	for _, p := range a.Providers {
		offers, err := p.Offers(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("offers from %s: %w", p.Name(), err))
			continue
		}
		for _, o := range offers {
			if _, dup := out[o.Pool]; !dup {
				out[o.Pool] = poolOffer{provider: p, offer: o}
			}
		}
	}
	return out, errors.Join(errs...)
}

// providerOf returns the provider the instance was launched through.
func (a *Autoscaler) providerOf(name string) InstanceProvider {
	for _, p := range a.Providers {
		if p.Name() == name {
			return p
		}
	}
	return nil
}

// workerSign is what one pass knows of an instance's worker: what it wrote
// through the worker service, and its latest beat.
type workerSign struct {
	queue.WorkerActivity
	// beat is when its latest beat was heard; zero if none.
	beat time.Time
	// paused: that beat said the worker takes no work after host errors
	// in a row, the last of them pauseReason.
	paused      bool
	pauseReason string
	// heardLong: the autoscaler has listened to beats long enough for
	// silence to mean that the worker is not up.
	heardLong bool
}

// seen is the worker's latest sign of life, zero if it has given none: a
// beat, an attempt on the instance (the store reports the instance's request
// time when it ran none) or a canary run.
func (w workerSign) seen(in *queue.Instance) time.Time {
	t := w.beat
	if w.LastActive.After(in.RequestedAt) && w.LastActive.After(t) {
		t = w.LastActive
	}
	if w.CanaryAt != nil && w.CanaryAt.After(t) {
		t = *w.CanaryAt
	}
	return t
}

// workerUp says whether the instance's worker has been heard from. Records
// written before a worker_seen_at meant that carry the request time.
func workerUp(in *queue.Instance) bool {
	return in.WorkerSeenAt != nil && in.WorkerSeenAt.After(in.RequestedAt)
}

// watch brings one live instance's record up to date with its provider and
// its worker, and releases it when it timed out booting, was quarantined,
// or its worker, idle, pauses after host errors; it returns the instance as
// recorded afterwards.
func (a *Autoscaler) watch(ctx context.Context, cfg AutoscalerConfig, logger *slog.Logger, now time.Time,
	pools map[string]poolOffer, in *queue.Instance, w workerSign) (*queue.Instance, error) {
	act := w.WorkerActivity
	p := a.providerOf(in.Provider)
	if p == nil {
		return in, fmt.Errorf("instance %s: no provider %q configured", in.ID, in.Provider)
	}
	l := cfg.Limits(in.Pool)
	if in.State == queue.InstanceRequested {
		// A launch recorded but never answered: the server stopped between
		// asking and recording, or the provider's answer was lost. The same
		// client token finds the machine if one was rented.
		po, ok := pools[in.Pool]
		if !ok {
			return a.change(ctx, in, queue.InstanceFailed, fmt.Sprintf("pool %s is no longer offered", in.Pool), nil)
		}
		return a.launchRecorded(ctx, logger, now, po, l, in)
	}
	got, err := p.Describe(ctx, in.ProviderID)
	if errors.Is(err, adapters.ErrNotFound) {
		return a.change(ctx, in, queue.InstancePreempted, "the provider no longer has the instance", nil)
	}
	if err != nil {
		return in, fmt.Errorf("describing instance %s: %w", in.ID, err)
	}
	if got.State.Gone() {
		end, reason := queue.InstancePreempted, "ended by the provider"
		if in.State == queue.InstanceDraining {
			end, reason = queue.InstanceTerminated, ""
		}
		if got.Reason != "" && end == queue.InstancePreempted {
			reason += ": " + got.Reason
		}
		if got.State == adapters.StateFailed && end == queue.InstancePreempted {
			end = queue.InstanceFailed
		}
		if act.QuarantinedAt != nil && end != queue.InstanceTerminated {
			// A quarantined worker exits on its own; the pool pays for it.
			end, reason = queue.InstanceFailed, "canary quarantined the node: "+act.QuarantineReason
			a.exhaust(ctx, logger, in.Pool, now, l.Backoff, reason)
		}
		return a.change(ctx, in, end, reason, nil)
	}
	if in.State == queue.InstanceDraining {
		return in, nil
	}
	if seen := w.seen(in); !seen.IsZero() && (!workerUp(in) || seen.Sub(*in.WorkerSeenAt) >= seenEvery) {
		if err := a.Store.SetWorkerSeen(ctx, in.ID, seen); err != nil {
			return in, err
		}
		updated := *in
		updated.WorkerSeenAt = &seen
		in = &updated
	}
	if act.QuarantinedAt != nil {
		reason := "canary quarantined the node: " + act.QuarantineReason
		a.exhaust(ctx, logger, in.Pool, now, l.Backoff, reason)
		return a.release(ctx, p, in, reason)
	}
	if w.paused && act.Busy == 0 {
		// Its machine failed jobs around their runs (a full disk, a
		// broken mount): another machine of the pool takes its place as
		// the pool's demand calls for one. One machine's fault says
		// nothing of the others, but a second within the pool's back-off
		// says the pool's machines fail alike (its image, its region's
		// store): the pool is left alone and its waiting jobs move.
		reason := "its worker took no work after host errors in a row: " + w.pauseReason
		out, err := a.release(ctx, p, in, reason)
		if err != nil {
			return out, err
		}
		if since, again := a.releasedPaused(in.Pool, now, l.Backoff); again {
			a.exhaust(ctx, logger, in.Pool, now, l.Backoff, fmt.Sprintf("instance %s: %s; the second machine of the pool to fail so within %s",
				in.ID, reason, since.Round(time.Second)))
		}
		return out, nil
	}
	if in.State == queue.InstancePending {
		if workerUp(in) {
			return a.change(ctx, in, queue.InstanceReady, "worker up", nil)
		}
		if since := deref(in.LaunchedAt, in.RequestedAt); now.Sub(since) >= l.BootTimeout && w.heardLong {
			reason := fmt.Sprintf("no ready worker within the boot timeout %s", l.BootTimeout)
			if got.State == adapters.StateRunning {
				reason += " (the provider runs the machine; its worker never reported)"
			}
			a.exhaust(ctx, logger, in.Pool, now, l.Backoff, fmt.Sprintf("instance %s: %s", in.ID, reason))
			out, err := a.release(ctx, p, in, reason)
			if err == nil {
				err = a.replaceWaiting(ctx, logger, now, in.Pool, fmt.Sprintf("instance %s of pool %s booted no worker within %s", in.ID, in.Pool, l.BootTimeout))
			}
			return out, err
		}
	}
	return in, nil
}

// scalePool launches what the pool's demand calls for, releases idle
// instances beyond its minimum, and moves its waiting jobs when it cannot
// serve them.
func (a *Autoscaler) scalePool(ctx context.Context, cfg AutoscalerConfig, logger *slog.Logger, now time.Time,
	po poolOffer, d queue.PoolDemand, byPool map[string][]*queue.Instance, activity map[string]queue.WorkerActivity) error {
	pool := po.offer.Pool
	live := byPool[pool]
	l := cfg.Limits(pool)
	var up, ready []*queue.Instance
	for _, in := range live {
		if in.State != queue.InstanceDraining {
			up = append(up, in)
		}
		if in.State == queue.InstanceReady {
			ready = append(ready, in)
		}
	}
	if ex, ok := a.exhaustedUntil(pool, now); ok {
		if d.Waiting > 0 {
			return a.replaceWaiting(ctx, logger, now, pool, ex.reason)
		}
		return nil
	}
	if d.Waiting > 0 && len(ready) == 0 && now.Sub(d.OldestWaiting) >= l.PlacementTimeout {
		reason := fmt.Sprintf("jobs waited %s on pool %s with no ready worker", now.Sub(d.OldestWaiting).Round(time.Second), pool)
		a.exhaust(ctx, logger, pool, now, l.Backoff, reason)
		return a.replaceWaiting(ctx, logger, now, pool, reason)
	}
	need := min(max(ceilDiv(d.Waiting+d.Running, l.Slots), l.Min), l.Max)
	if n := need - len(up); n > 0 {
		var all []*queue.Instance
		for _, ins := range byPool {
			all = append(all, ins...)
		}
		added, err := a.launch(ctx, cfg, logger, now, po, l, n, up, all, d)
		for _, in := range added {
			byPool[pool] = append(byPool[pool], in)
		}
		return err
	}
	// Release idle workers beyond what the work and the minimum call for,
	// longest idle first.
	spare := len(up) - need
	if spare <= 0 || d.Waiting > 0 {
		return nil
	}
	slices.SortFunc(ready, func(x, y *queue.Instance) int {
		return idleSince(x, activity[x.ID]).Compare(idleSince(y, activity[y.ID]))
	})
	p := po.provider
	for _, in := range ready {
		if spare == 0 {
			break
		}
		act := activity[in.ID]
		idle := now.Sub(idleSince(in, act))
		if act.Busy > 0 || idle < l.IdleTimeout {
			continue
		}
		if _, err := a.release(ctx, p, in, fmt.Sprintf("idle for %s (idle timeout %s)", idle.Round(time.Second), l.IdleTimeout)); err != nil {
			return err
		}
		spare--
	}
	return nil
}

// idleSince is when the instance's worker last did anything: its latest
// attempt activity, else when it became ready.
func idleSince(in *queue.Instance, act queue.WorkerActivity) time.Time {
	t := deref(in.ReadyAt, in.RequestedAt)
	if act.LastActive.After(t) {
		t = act.LastActive
	}
	return t
}

// launch rents up to n instances within the pool's launch rate and spend
// bounds, each for the project with the most jobs waiting in the pool that
// its own bounds (over all live instances) still allow. It returns the
// instances it launched.
func (a *Autoscaler) launch(ctx context.Context, cfg AutoscalerConfig, logger *slog.Logger, now time.Time, po poolOffer, l PoolLimits,
	n int, up, all []*queue.Instance, d queue.PoolDemand) ([]*queue.Instance, error) {
	pool := po.offer.Pool
	recent, err := a.Store.LaunchesSince(ctx, pool, now.Add(-time.Minute))
	if err != nil {
		return nil, err
	}
	n = min(n, l.MaxLaunchesPerMinute-recent)
	price := po.offer.PricePerHour
	if l.MaxSpendPerHour != "" {
		limit, _ := policy.ParseMoney(l.MaxSpendPerHour) // checked by Validate
		if limit.Currency != price.Currency {
			return nil, fmt.Errorf("max_spend_per_hour is in %s, the pool's offer in %s", limit.Currency, price.Currency)
		}
		spent := int64(0)
		for _, in := range up {
			spent += in.PriceMicros
		}
		for n > 0 && spent+int64(n)*price.Micros > limit.Micros {
			n--
		}
	}
	var added []*queue.Instance
	for range max(n, 0) {
		project, ok := projectFor(cfg, d, all, price, l.Slots)
		if !ok {
			logger.Info("project bounds hold back a launch", "pool", pool, "waiting", d.WaitingByProject)
			break
		}
		id := "gq-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:20]
		in, err := a.Store.RecordInstance(ctx, queue.NewInstance{
			ID: id, Provider: po.provider.Name(), Pool: pool, Project: project, ClientToken: id, Slots: l.Slots,
			PriceMicros: price.Micros, Currency: price.Currency, Billing: l.Billing,
			Message: fmt.Sprintf("%d jobs waiting (oldest %s), %d running, %d instances up", d.Waiting,
				now.Sub(d.OldestWaiting).Round(time.Second), d.Running, len(up)+len(added)),
		})
		if err != nil {
			return added, err
		}
		got, err := a.launchRecorded(ctx, logger, now, po, l, in)
		if err != nil {
			return added, err
		}
		if got == nil || !got.State.Live() {
			return added, nil // no capacity: the pool is exhausted for its back-off
		}
		added = append(added, got)
		all = append(all, got)
	}
	return added, nil
}

// projectFor picks the project a launch in the pool is for: the one with the
// most waiting jobs there that the instances already coming up for it do not
// cover and whose bounds allow one more instance at price. With no job
// waiting (a pool's minimum, or running jobs' slots) the launch is for no
// project.
func projectFor(cfg AutoscalerConfig, d queue.PoolDemand, all []*queue.Instance, price policy.Money, slots int) (string, bool) {
	if len(d.WaitingByProject) == 0 {
		return "", true
	}
	projects := make([]string, 0, len(d.WaitingByProject))
	for p := range d.WaitingByProject {
		projects = append(projects, p)
	}
	slices.SortFunc(projects, func(x, y string) int {
		if c := d.WaitingByProject[y] - d.WaitingByProject[x]; c != 0 {
			return c
		}
		return strings.Compare(x, y)
	})
	for _, p := range projects {
		count, coming, spend := 0, 0, int64(0)
		for _, in := range all {
			if in.Project != p || !in.State.Live() {
				continue
			}
			count++
			if in.Pool == d.Pool && (in.State == queue.InstanceRequested || in.State == queue.InstancePending) {
				coming++
			}
			if in.Currency == price.Currency {
				spend += in.PriceMicros
			}
		}
		if coming*slots >= d.WaitingByProject[p] {
			continue
		}
		lim, bounded := cfg.Projects[p]
		if !bounded {
			return p, true
		}
		if lim.MaxInstances > 0 && count >= lim.MaxInstances {
			continue
		}
		if lim.MaxSpendPerHour != "" {
			limit, _ := policy.ParseMoney(lim.MaxSpendPerHour) // checked by Validate
			if limit.Currency != price.Currency || spend+price.Micros > limit.Micros {
				continue
			}
		}
		return p, true
	}
	return "", false
}

// launchRecorded asks the provider for the recorded instance, by its client
// token, and records the answer.
func (a *Autoscaler) launchRecorded(ctx context.Context, logger *slog.Logger, now time.Time, po poolOffer, l PoolLimits, in *queue.Instance) (*queue.Instance, error) {
	boot := adapters.BootSpec{InstanceID: in.ID, Pool: in.Pool, Region: po.offer.Region, Country: po.offer.Country,
		Slots: in.Slots, WorkerArgs: a.Boot.WorkerArgs, NATSURL: a.Boot.NATSURL, Executable: a.Boot.Executable}
	if a.Boot.Credentials != nil {
		cred, err := a.Boot.Credentials.WorkerCredential(in.Pool, po.offer.Region, in.ID)
		if err != nil {
			return a.change(ctx, in, queue.InstanceFailed, "launch refused: "+err.Error(), nil)
		}
		boot.Credential = cred
	}
	a.expectBoot(in.ID)
	got, err := po.provider.Launch(ctx, adapters.LaunchRequest{Pool: in.Pool, ClientToken: in.ClientToken, Boot: boot})
	switch {
	case errors.Is(err, adapters.ErrCapacityUnavailable):
		a.recordPool(ctx, logger, now, in.Pool, queue.PoolNoCapacity)
		reason := fmt.Sprintf("no capacity in pool %s: %v", in.Pool, err)
		a.exhaust(ctx, logger, in.Pool, now, l.Backoff, reason)
		out, cerr := a.change(ctx, in, queue.InstanceFailed, reason, nil)
		if cerr != nil {
			return out, cerr
		}
		return out, a.replaceWaiting(ctx, logger, now, in.Pool, reason)
	case errors.Is(err, adapters.ErrTransient), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The outcome is unknown; the next pass asks again with the same
		// token, which finds the machine if one was rented.
		return in, fmt.Errorf("launching instance %s: %w", in.ID, err)
	case err != nil:
		return a.change(ctx, in, queue.InstanceFailed, "launch refused: "+err.Error(), nil)
	}
	a.recordPool(ctx, logger, now, in.Pool, queue.PoolLaunched)
	launched := got.LaunchedAt
	if launched.IsZero() {
		launched = now
	}
	logger.Info("launched an instance", "instance", in.ID, "pool", in.Pool, "provider_id", got.ProviderID)
	out, err := a.Store.ChangeInstance(ctx, queue.InstanceChange{ID: in.ID, From: []queue.InstanceState{queue.InstanceRequested},
		To: queue.InstancePending, ProviderID: got.ProviderID, LaunchedAt: &launched, Reason: "rented as " + got.ProviderID})
	if errors.Is(err, queue.ErrInstanceMoved) {
		return in, nil
	}
	return out, err
}

// observePools records one observation of every pool offered in the pools'
// availability history, as an offer refresh of the placer does (the store
// counts one per slot however many observe it); a failure to record is
// logged and does not stop the pass.
func (a *Autoscaler) observePools(ctx context.Context, logger *slog.Logger, now time.Time, pools map[string]poolOffer) {
	if a.Pools == nil || len(pools) == 0 {
		return
	}
	obs := make([]queue.PoolObservation, 0, len(pools))
	for name, p := range pools {
		obs = append(obs, queue.PoolObservation{Pool: name, Up: p.offer.Availability != policy.Unavailable,
			PriceMicros: p.offer.PricePerHour.Micros, Currency: p.offer.PricePerHour.Currency})
	}
	if err := a.Pools.ObservePools(ctx, now, obs); err != nil && ctx.Err() == nil {
		logger.Warn("recording the pools' availability", "err", err)
	}
}

// recordPool adds what a launch said of a pool to its availability history;
// a failure to record is logged and does not stop the launch.
func (a *Autoscaler) recordPool(ctx context.Context, logger *slog.Logger, now time.Time, pool, kind string) {
	if a.Pools == nil {
		return
	}
	if err := a.Pools.RecordPoolEvent(ctx, queue.PoolEvent{Pool: pool, Kind: kind, At: now}); err != nil && ctx.Err() == nil {
		logger.Warn("recording the pool's history", "pool", pool, "err", err)
	}
}

// release terminates the instance at its provider and records it draining;
// the pass that finds it gone records it terminated.
func (a *Autoscaler) release(ctx context.Context, p InstanceProvider, in *queue.Instance, reason string) (*queue.Instance, error) {
	out, err := a.change(ctx, in, queue.InstanceDraining, reason, nil)
	if err != nil {
		return in, err
	}
	if err := p.Terminate(ctx, in.ProviderID); err != nil {
		return out, fmt.Errorf("terminating instance %s: %w", in.ID, err)
	}
	return out, nil
}

// change moves the instance from its recorded state; one another pass moved
// first is left as that pass left it.
func (a *Autoscaler) change(ctx context.Context, in *queue.Instance, to queue.InstanceState, reason string, ended *time.Time) (*queue.Instance, error) {
	out, err := a.Store.ChangeInstance(ctx, queue.InstanceChange{ID: in.ID, From: []queue.InstanceState{in.State}, To: to, Reason: reason, EndedAt: ended})
	if errors.Is(err, queue.ErrInstanceMoved) {
		return nil, nil
	}
	return out, err
}

// exhaust leaves the pool alone until now+backoff, and records so.
func (a *Autoscaler) exhaust(ctx context.Context, logger *slog.Logger, pool string, now time.Time, backoff time.Duration, reason string) {
	a.mu.Lock()
	if a.exhausted == nil {
		a.exhausted = map[string]exhaustion{}
	}
	if ex, ok := a.exhausted[pool]; ok && ex.until.After(now) {
		a.mu.Unlock()
		return
	}
	ex := exhaustion{until: now.Add(backoff), at: now, reason: reason}
	a.exhausted[pool] = ex
	a.mu.Unlock()
	if a.Exhaustions == nil {
		return
	}
	if err := a.Exhaustions.RecordExhaustion(ctx, queue.PoolExhaustion{Pool: pool, At: ex.at, Until: ex.until, Reason: reason}); err != nil && ctx.Err() == nil {
		// This server still leaves the pool alone; only a successor would
		// not know to.
		logger.Warn("recording an exhausted pool", "pool", pool, "err", err)
	}
}

// releasedPaused notes a release of one of pool's instances whose worker
// paused after host errors, and reports how long ago the previous one was
// when that is within backoff.
func (a *Autoscaler) releasedPaused(pool string, now time.Time, backoff time.Duration) (time.Duration, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pausedReleases == nil {
		a.pausedReleases = map[string]time.Time{}
	}
	last, ok := a.pausedReleases[pool]
	a.pausedReleases[pool] = now
	return now.Sub(last), ok && now.Sub(last) < backoff
}

// readExhaustions takes in, once, the pools a former leader left alone.
func (a *Autoscaler) readExhaustions(ctx context.Context, logger *slog.Logger, now time.Time) {
	a.mu.Lock()
	read := a.exhaustionsRead
	a.mu.Unlock()
	if read || a.Exhaustions == nil {
		return
	}
	recorded, err := a.Exhaustions.Exhaustions(ctx, now)
	if err != nil {
		logger.Warn("reading the pools left alone before this server led; asking again next pass", "err", err)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.exhaustionsRead = true
	if a.exhausted == nil {
		a.exhausted = map[string]exhaustion{}
	}
	for _, e := range recorded {
		if ex, ok := a.exhausted[e.Pool]; !ok || ex.until.Before(e.Until) {
			a.exhausted[e.Pool] = exhaustion{until: e.Until, at: e.At, reason: e.Reason}
			logger.Info("pool left alone, as recorded before this server led", "pool", e.Pool, "until", e.Until, "reason", e.Reason)
		}
	}
}

func (a *Autoscaler) exhaustedUntil(pool string, now time.Time) (exhaustion, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ex, ok := a.exhausted[pool]
	return ex, ok && ex.until.After(now)
}

// Exhausted lists the pools being left alone now, with why.
func (a *Autoscaler) Exhausted(now time.Time) map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]string{}
	for pool, ex := range a.exhausted {
		if ex.until.After(now) {
			out[pool] = ex.reason
		}
	}
	return out
}

// capacityEvents are the no-capacity events of every exhausted pool, so that
// a job's plan B avoids them all.
func (a *Autoscaler) capacityEvents(now time.Time) []policy.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []policy.Event
	for pool, ex := range a.exhausted {
		if ex.until.After(now) {
			out = append(out, policy.Event{Pool: pool, Kind: policy.EventNoCapacity, At: ex.at})
		}
	}
	slices.SortFunc(out, func(x, y policy.Event) int { return strings.Compare(x.Pool, y.Pool) })
	return out
}

// maxReplacedPerPass bounds the jobs one pass moves off one pool.
const maxReplacedPerPass = 500

// replaceWaiting moves the jobs waiting on pool to their plan B (inside their
// residency and budget, avoiding every exhausted pool) and notes why in each
// job's audit trail. A job with no plan B stays and is noted once.
func (a *Autoscaler) replaceWaiting(ctx context.Context, logger *slog.Logger, now time.Time, pool, reason string) error {
	ids, err := a.Store.WaitingInPool(ctx, pool, maxReplacedPerPass)
	if err != nil {
		return err
	}
	events := a.capacityEvents(now)
	var errs []error
	for _, id := range ids {
		if err := a.replaceJob(ctx, logger, id, pool, reason, events); err != nil {
			errs = append(errs, fmt.Errorf("re-placing job %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

func (a *Autoscaler) replaceJob(ctx context.Context, logger *slog.Logger, id uuid.UUID, pool, reason string, events []policy.Event) error {
	job, err := a.Store.Job(ctx, id)
	if err != nil {
		return err
	}
	if job.State != queue.StatePlaced || job.Pool != pool {
		return nil
	}
	current, err := a.Store.LatestPlacement(ctx, id)
	if err != nil {
		return err
	}
	attempts, err := a.Store.Attempts(ctx, id)
	if err != nil {
		return err
	}
	next, err := a.Placer.Place(ctx, job, &Prior{Placement: *current, Attempts: attempts, Events: events})
	var rej *queue.RejectionError
	if errors.As(err, &rej) {
		logger.Info("no plan B for a job on an exhausted pool; it waits there", "job", id, "pool", pool, "reason", rej.Reason)
		return nil
	}
	if err != nil {
		return err
	}
	if next.Pool == current.Pool {
		return nil
	}
	next.Version = job.PlacementVersion + 1
	done, err := a.Store.CommitPlacements(ctx, queue.Decided{Placed: []queue.PlacedJob{{JobID: id, Placement: next}}})
	if err != nil || len(done) == 0 {
		return err
	}
	if err := a.Store.NoteJob(ctx, id, fmt.Sprintf("moved from pool %s to %s: %s", pool, next.Pool, reason)); err != nil {
		return err
	}
	logger.Info("moved a waiting job to its plan B", "job", id, "from", pool, "to", next.Pool, "reason", reason)
	return publishOrders(ctx, a.JS, []queue.RunOrder{orderFor(id, next)}, "")
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// deref returns *t, or or when t is nil.
func deref(t *time.Time, or time.Time) time.Time {
	if t == nil {
		return or
	}
	return *t
}
