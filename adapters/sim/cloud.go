package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/policy"
)

// Op names a call of the simulated cloud's API, for Fail and Calls.
type Op string

const (
	OpOffers    Op = "offers"
	OpLaunch    Op = "launch"
	OpDescribe  Op = "describe"
	OpList      Op = "list"
	OpTerminate Op = "terminate"
)

// Event is something the cloud did on its own: a preemption, a worker that
// died.
type Event struct {
	Instance string
	Pool     string
	// Tick is the pool's trace tick when it happened; -1 without a trace.
	Tick   int
	State  adapters.InstanceState
	Reason string
}

// Cloud is the simulated cloud: its pools, instances and clock. Its API
// (what Provider calls) fails on request through Fail and
// DropNextLaunchResponse, the way a real provider's does.
type Cloud struct {
	cfg     Config
	pools   map[string]*pool
	order   []string
	workers *local.Launcher
	logger  *slog.Logger
	// onEvent, when set, hears of every event.
	onEvent func(Event)
	// start is when the virtual clock started (unix nanoseconds): at New,
	// and again when Run begins.
	start atomic.Int64

	mu        sync.Mutex
	instances map[string]*instance
	created   int
	faults    map[Op][]fault
	dropNext  bool
	calls     map[Op][]time.Time
	pageSize  int
}

type fault struct {
	kind       error
	retryAfter time.Duration
}

// instance is one simulated machine.
type instance struct {
	adapters.Instance
	boot     adapters.BootSpec
	bootAt   time.Duration // virtual time it comes up
	createdV time.Duration // virtual time it was created
	proc     *local.Instance
	killAt   time.Time // real time of SIGKILL while stopping
	endState adapters.InstanceState
}

// New builds the cloud; workers starts the instances' worker processes
// (its Env is what the simulated machine image provides). onEvent, if not
// nil, hears of every preemption and lost worker.
func New(cfg Config, workers *local.Launcher, logger *slog.Logger, onEvent func(Event)) (*Cloud, error) {
	cfg = cfg.WithDefaults()
	pools, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if workers == nil {
		return nil, errors.New("sim: a launcher for the worker processes is required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Cloud{cfg: cfg, pools: map[string]*pool{}, workers: workers, logger: logger, onEvent: onEvent,
		instances: map[string]*instance{}, faults: map[Op][]fault{}, calls: map[Op][]time.Time{},
		pageSize: cfg.PageSize}
	c.start.Store(time.Now().UnixNano())
	for _, p := range pools {
		c.pools[p.Pool] = p
		c.order = append(c.order, p.Pool)
	}
	return c, nil
}

// Virtual is the virtual time: how far into the traces the clock is.
func (c *Cloud) Virtual() time.Duration {
	return c.cfg.Start + time.Duration(float64(time.Since(time.Unix(0, c.start.Load())))*c.cfg.Speed)
}

// Tick is pool's trace tick now (-1 for a pool without a trace).
func (c *Cloud) Tick(pool string) int {
	p, ok := c.pools[pool]
	if !ok || p.trace == nil {
		return -1
	}
	return p.tick(c.Virtual())
}

func (p *pool) tick(v time.Duration) int {
	return int(v/p.trace.Gap) % len(p.trace.Avail)
}

// capacity is how many instances the pool can hold at virtual time v; -1
// for no bound.
func (p *pool) capacity(v time.Duration) int {
	if p.trace != nil {
		return int(p.trace.Avail[p.tick(v)])
	}
	if p.Capacity > 0 {
		return p.Capacity
	}
	return -1
}

// Pools returns the pools' offers as configured, availability aside.
func (c *Cloud) Pools() []PoolConfig {
	out := make([]PoolConfig, len(c.order))
	for i, name := range c.order {
		out[i] = c.pools[name].PoolConfig
	}
	return out
}

// Fail makes the next n calls of op fail with kind; a rate-limited failure
// asks for retryAfter.
func (c *Cloud) Fail(op Op, kind error, n int, retryAfter time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for range n {
		c.faults[op] = append(c.faults[op], fault{kind: kind, retryAfter: retryAfter})
	}
}

// DropNextLaunchResponse makes the next launch create its instance and then
// answer as if the provider had failed.
func (c *Cloud) DropNextLaunchResponse() {
	c.mu.Lock()
	c.dropNext = true
	c.mu.Unlock()
}

// SetPageSize sets the most items a listing page holds.
func (c *Cloud) SetPageSize(n int) {
	c.mu.Lock()
	c.pageSize = max(n, 1)
	c.mu.Unlock()
}

// Created is how many instances the cloud has created.
func (c *Cloud) Created() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.created
}

// Calls are the times of op's calls.
func (c *Cloud) Calls(op Op) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls[op])
}

// BootAll brings every pending instance up now, whatever its boot delay.
func (c *Cloud) BootAll(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, in := range c.instances {
		if in.State == adapters.StatePending {
			c.boot(ctx, in)
		}
	}
}

// enter records a call of op and returns the failure injected for it;
// c.mu is held.
func (c *Cloud) enter(op Op, pool string) error {
	c.calls[op] = append(c.calls[op], time.Now())
	if fs := c.faults[op]; len(fs) > 0 {
		f := fs[0]
		c.faults[op] = fs[1:]
		return &adapters.ProviderError{Provider: ProviderName, Op: string(op), Pool: pool, Kind: f.kind,
			RetryAfter: f.retryAfter, Err: errors.New("injected by the simulated cloud")}
	}
	return nil
}

func (c *Cloud) fail(op Op, pool string, kind error, err error) error {
	return &adapters.ProviderError{Provider: ProviderName, Op: string(op), Pool: pool, Kind: kind, Err: err}
}

// page returns items[from:] cut to the page size, and the next page token.
func page[T any](items []T, token string, size int) ([]T, string, error) {
	from := 0
	if token != "" {
		n, err := strconv.Atoi(token)
		if err != nil || n < 0 || n > len(items) {
			return nil, "", fmt.Errorf("bad page token %q", token)
		}
		from = n
	}
	to := min(from+size, len(items))
	next := ""
	if to < len(items) {
		next = strconv.Itoa(to)
	}
	return items[from:to], next, nil
}

// offers is the API's offer listing.
func (c *Cloud) offers(_ context.Context, pageToken string) ([]policy.Offer, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enter(OpOffers, ""); err != nil {
		return nil, "", err
	}
	v := c.Virtual()
	var all []policy.Offer
	for _, name := range c.order {
		p := c.pools[name]
		o := p.offer
		// Capacity the pool holds for instances already running is still
		// capacity: their workers take the pool's jobs.
		switch capa := p.capacity(v); {
		case capa == 0:
			o.Availability = policy.Unavailable
		case capa > 0 && c.live(name) >= capa:
			o.Availability = policy.Scarce
		}
		all = append(all, o)
	}
	out, next, err := page(all, pageToken, c.pageSize)
	if err != nil {
		return nil, "", c.fail(OpOffers, "", adapters.ErrInvalidRequest, err)
	}
	return out, next, nil
}

// live counts pool's instances that hold capacity; c.mu is held.
func (c *Cloud) live(pool string) int {
	n := 0
	for _, in := range c.instances {
		if in.Pool == pool && (in.State == adapters.StatePending || in.State == adapters.StateRunning) {
			n++
		}
	}
	return n
}

// create is the API's launch: one call, one instance, no retries.
func (c *Cloud) create(ctx context.Context, req adapters.LaunchRequest) (adapters.Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enter(OpLaunch, req.Pool); err != nil {
		return adapters.Instance{}, err
	}
	p, ok := c.pools[req.Pool]
	if !ok {
		return adapters.Instance{}, c.fail(OpLaunch, req.Pool, adapters.ErrInvalidRequest, fmt.Errorf("no pool %q", req.Pool))
	}
	if err := req.Validate(); err != nil {
		return adapters.Instance{}, c.fail(OpLaunch, req.Pool, adapters.ErrInvalidRequest, err)
	}
	v := c.Virtual()
	if capa := p.capacity(v); capa >= 0 && c.live(req.Pool) >= capa {
		reason := fmt.Sprintf("%d of %d instances held", c.live(req.Pool), capa)
		if p.trace != nil {
			reason = fmt.Sprintf("trace %s holds %d instances at tick %d", p.Trace, capa, p.tick(v))
		}
		return adapters.Instance{}, c.fail(OpLaunch, req.Pool, adapters.ErrCapacityUnavailable, errors.New(reason))
	}
	c.created++
	id := fmt.Sprintf("sim-%06d", c.created)
	in := &instance{
		Instance: adapters.Instance{
			Provider: ProviderName, ProviderID: id, Pool: req.Pool, State: adapters.StatePending,
			LaunchedAt: time.Now(), PricePerHour: p.offer.PricePerHour, ClientToken: req.ClientToken, Tags: req.Tags(),
		},
		boot: req.Boot, bootAt: v + p.BootDelay, createdV: v,
	}
	c.instances[id] = in
	if p.BootDelay == 0 {
		c.boot(ctx, in)
	}
	if c.dropNext {
		c.dropNext = false
		return adapters.Instance{}, c.fail(OpLaunch, req.Pool, adapters.ErrProviderDown, errors.New("the response to a launch was lost"))
	}
	return in.view(), nil
}

func (in *instance) view() adapters.Instance {
	v := in.Instance
	v.Tags = maps(in.Tags)
	return v
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// boot starts the instance's worker; c.mu is held.
func (c *Cloud) boot(_ context.Context, in *instance) {
	// A simulated machine has none of its card's GPUs, so its worker runs
	// without the canary.
	args := append(in.boot.Args(), "--no-canary")
	proc, err := c.workers.Start(context.Background(), in.Pool, args, in.boot.Environ())
	if err != nil {
		in.State, in.Reason = adapters.StateFailed, err.Error()
		c.logger.Error("sim: starting a worker", "instance", in.ProviderID, "pool", in.Pool, "err", err)
		return
	}
	in.proc, in.State = proc, adapters.StateRunning
	c.logger.Info("sim: instance running", "instance", in.ProviderID, "pool", in.Pool, "pid", proc.PID())
}

// get is the API's describe.
func (c *Cloud) get(_ context.Context, id string) (adapters.Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enter(OpDescribe, ""); err != nil {
		return adapters.Instance{}, err
	}
	in, ok := c.instances[id]
	if !ok {
		return adapters.Instance{}, c.fail(OpDescribe, "", adapters.ErrNotFound, fmt.Errorf("no instance %q", id))
	}
	return in.view(), nil
}

// list is the API's instance listing, oldest first, gone ones included.
func (c *Cloud) list(_ context.Context, pageToken string) ([]adapters.Instance, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enter(OpList, ""); err != nil {
		return nil, "", err
	}
	all := make([]adapters.Instance, 0, len(c.instances))
	for _, in := range c.instances {
		all = append(all, in.view())
	}
	slices.SortFunc(all, func(a, b adapters.Instance) int { return compareIDs(a.ProviderID, b.ProviderID) })
	out, next, err := page(all, pageToken, c.pageSize)
	if err != nil {
		return nil, "", c.fail(OpList, "", adapters.ErrInvalidRequest, err)
	}
	return out, next, nil
}

func compareIDs(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// remove is the API's terminate: SIGTERM to the worker, SIGKILL after the
// pool's grace.
func (c *Cloud) remove(_ context.Context, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enter(OpTerminate, ""); err != nil {
		return err
	}
	in, ok := c.instances[id]
	if !ok {
		return c.fail(OpTerminate, "", adapters.ErrNotFound, fmt.Errorf("no instance %q", id))
	}
	if in.State.Gone() || in.State == adapters.StateStopping {
		return nil
	}
	c.stop(in, adapters.StateTerminated, "terminated on request", adapters.NoticeSIGTERM)
	return nil
}

// stop begins an instance's end; c.mu is held.
func (c *Cloud) stop(in *instance, end adapters.InstanceState, reason string, notice adapters.NoticeSource) {
	in.Reason, in.endState = reason, end
	if in.proc == nil {
		in.State = end
		return
	}
	in.State = adapters.StateStopping
	grace := c.pools[in.Pool].Grace
	sig := syscall.SIGTERM
	if notice == adapters.NoticeNone {
		sig = syscall.SIGKILL
	}
	in.killAt = time.Now().Add(grace)
	in.proc.Signal(sig) //nolint:errcheck // it may have exited; step notices
}

// Run moves the cloud along its clock until ctx ends, then stops every
// worker (SIGINT, SIGKILL after the pool's grace) and returns.
func (c *Cloud) Run(ctx context.Context) error {
	// The clock starts with the cloud, whatever came between New and Run.
	c.start.Store(time.Now().UnixNano())
	t := time.NewTicker(c.cfg.Step)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.shutdown()
			return nil
		case <-t.C:
			c.step(ctx)
		}
	}
}

// step boots due instances, preempts what the traces take away and settles
// instances whose worker has ended.
func (c *Cloud) step(ctx context.Context) {
	var events []Event
	c.mu.Lock()
	v := c.Virtual()
	ids := make([]string, 0, len(c.instances))
	for id := range c.instances {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, compareIDs)
	for _, id := range ids {
		in := c.instances[id]
		switch {
		case in.State == adapters.StatePending && v >= in.bootAt:
			c.boot(ctx, in)
		case in.proc == nil:
		case in.State == adapters.StateRunning && c.pools[in.Pool].MaxDuration > 0 && v-in.createdV >= c.pools[in.Pool].MaxDuration:
			reason := fmt.Sprintf("maximum duration %s reached", c.pools[in.Pool].MaxDuration)
			c.stop(in, adapters.StateTerminated, reason, adapters.NoticeSource(c.pools[in.Pool].Notice))
			events = append(events, Event{Instance: id, Pool: in.Pool, Tick: -1, State: adapters.StateTerminated, Reason: reason})
		case in.State == adapters.StateRunning && exited(in.proc):
			in.State, in.Reason = adapters.StateFailed, "worker exited: "+exitReason(in.proc)
			events = append(events, Event{Instance: id, Pool: in.Pool, Tick: -1, State: in.State, Reason: in.Reason})
		case in.State == adapters.StateStopping && exited(in.proc):
			in.State = in.endState
		case in.State == adapters.StateStopping && time.Now().After(in.killAt):
			in.proc.Signal(syscall.SIGKILL) //nolint:errcheck // it may have exited since
		}
	}
	for _, name := range c.order {
		p := c.pools[name]
		if p.trace == nil {
			continue
		}
		capa, tick := p.capacity(v), p.tick(v)
		for c.live(name) > capa {
			// The newest instance goes first, as spot capacity shrinks.
			victim := ""
			for _, id := range ids {
				if in := c.instances[id]; in.Pool == name && (in.State == adapters.StatePending || in.State == adapters.StateRunning) {
					victim = id
				}
			}
			in := c.instances[victim]
			reason := fmt.Sprintf("spot capacity reclaimed: trace %s holds %d instances at tick %d", p.Trace, capa, tick)
			c.stop(in, adapters.StatePreempted, reason, adapters.NoticeSource(p.Notice))
			events = append(events, Event{Instance: victim, Pool: name, Tick: tick, State: adapters.StatePreempted, Reason: reason})
		}
	}
	c.mu.Unlock()
	for _, e := range events {
		c.logger.Info("sim: "+string(e.State), "instance", e.Instance, "pool", e.Pool, "tick", e.Tick, "reason", e.Reason)
		if c.onEvent != nil {
			c.onEvent(e)
		}
	}
}

func exited(p *local.Instance) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

func exitReason(p *local.Instance) string {
	if err := p.Wait(); err != nil {
		return err.Error()
	}
	return "exit status 0"
}

// shutdown stops every worker as the simulation ends: SIGINT, a shutdown
// rather than a preemption (no trace took the machine), then SIGKILL
// after the pool's grace.
func (c *Cloud) shutdown() {
	c.mu.Lock()
	var procs []*instance
	for _, in := range c.instances {
		if in.proc != nil && !exited(in.proc) {
			in.proc.Signal(syscall.SIGINT) //nolint:errcheck // it may have exited
			procs = append(procs, in)
		}
	}
	c.mu.Unlock()
	for _, in := range procs {
		select {
		case <-in.proc.Done():
		case <-time.After(c.pools[in.Pool].Grace):
			in.proc.Signal(syscall.SIGKILL) //nolint:errcheck // it may have exited
			<-in.proc.Done()
		}
	}
}
