package local

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
)

// managed is one instance the provider launched.
type managed struct {
	inst       *Instance
	token      string
	tags       map[string]string
	price      policy.Money
	launchedAt time.Time
	terminated bool // Terminate was called
}

func (p *Provider) offer(pool string) (policy.Offer, bool) {
	for _, o := range p.offers {
		if o.Pool == pool {
			return o, true
		}
	}
	return policy.Offer{}, false
}

func (p *Provider) fail(op, pool string, kind error, err error) error {
	return &adapters.ProviderError{Provider: ProviderName, Op: op, Pool: pool, Kind: kind, Err: err}
}

// Launch starts a worker process for req.Pool running req.Boot's command
// line with its environment. A second launch with the same client token
// returns the first one's instance.
func (p *Provider) Launch(ctx context.Context, req adapters.LaunchRequest) (adapters.Instance, error) {
	if err := req.Validate(); err != nil {
		return adapters.Instance{}, p.fail("launch", req.Pool, adapters.ErrInvalidRequest, err)
	}
	o, ok := p.offer(req.Pool)
	if !ok {
		return adapters.Instance{}, p.fail("launch", req.Pool, adapters.ErrInvalidRequest, fmt.Errorf("no local pool %q", req.Pool))
	}
	if p.Workers == nil {
		return adapters.Instance{}, p.fail("launch", req.Pool, adapters.ErrInvalidRequest, errors.New("this local provider starts no workers"))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.byToken[req.ClientToken]; ok {
		return p.describe(id), nil
	}
	args := req.Boot.Args()
	if o.Card != "" && !slices.Contains(args, "--expect-card") {
		// The worker's canary checks that the machine has what the pool offers.
		args = append(args, "--expect-card", o.Card)
		if o.GPUCount > 0 {
			args = append(args, "--expect-count", strconv.Itoa(o.GPUCount))
		}
	}
	inst, err := p.Workers.Start(ctx, req.Pool, args, req.Boot.Environ())
	if err != nil {
		return adapters.Instance{}, p.fail("launch", req.Pool, adapters.ErrProviderDown, err)
	}
	if p.instances == nil {
		p.instances, p.byToken = map[string]*managed{}, map[string]string{}
	}
	m := &managed{inst: inst, token: req.ClientToken, tags: req.Tags(), price: o.PricePerHour, launchedAt: time.Now()}
	p.instances[inst.ID()], p.byToken[req.ClientToken] = m, inst.ID()
	return p.describe(inst.ID()), nil
}

// describe reads instance id; p.mu is held.
func (p *Provider) describe(id string) adapters.Instance {
	m := p.instances[id]
	state, reason := adapters.StateRunning, ""
	select {
	case <-m.inst.Done():
		state = adapters.StateFailed
		if m.terminated {
			state = adapters.StateTerminated
		}
		if err := m.inst.Wait(); err != nil {
			reason = err.Error()
		}
	default:
		if m.terminated {
			state = adapters.StateStopping
		}
	}
	return adapters.Instance{
		Provider: ProviderName, ProviderID: id, Pool: m.inst.Pool, State: state, Reason: reason,
		LaunchedAt: m.launchedAt, PricePerHour: m.price, ClientToken: m.token, Tags: m.tags,
	}
}

// Describe returns the instance; ErrNotFound for an id it never launched.
func (p *Provider) Describe(ctx context.Context, id string) (adapters.Instance, error) {
	if err := ctx.Err(); err != nil {
		return adapters.Instance{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.instances[id]; !ok {
		return adapters.Instance{}, p.fail("describe", "", adapters.ErrNotFound, fmt.Errorf("no instance %q", id))
	}
	return p.describe(id), nil
}

// Instances lists the launched instances that match f, oldest first.
func (p *Provider) Instances(ctx context.Context, f adapters.InstanceFilter) ([]adapters.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []adapters.Instance
	for id := range p.instances {
		if i := p.describe(id); f.Match(i) {
			out = append(out, i)
		}
	}
	slices.SortFunc(out, func(a, b adapters.Instance) int { return a.LaunchedAt.Compare(b.LaunchedAt) })
	return out, nil
}

// Terminate sends the worker SIGTERM (it hands its jobs back after their
// final checkpoint) and SIGKILL when it has not exited after the
// launcher's StopTimeout. An id it never launched is already gone.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	m, ok := p.instances[id]
	if ok && !m.terminated {
		m.terminated = true
		go stop(m.inst, p.Workers.stopTimeout())
	}
	p.mu.Unlock()
	return nil
}

// stop sends SIGTERM, then SIGKILL after timeout.
func stop(inst *Instance, timeout time.Duration) {
	if inst.Signal(syscall.SIGTERM) != nil {
		return // already gone
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-inst.Done():
	case <-t.C:
		inst.Signal(syscall.SIGKILL) //nolint:errcheck // it may have exited since
	}
}
