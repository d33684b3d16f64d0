package runpod

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
)

// Provider is the RunPod adapter.
type Provider struct {
	cfg   Config
	pools map[string]PoolConfig
}

// New returns the adapter for cfg.
func New(cfg Config) (*Provider, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Provider{cfg: cfg, pools: map[string]PoolConfig{}}
	for _, pool := range cfg.Pools {
		p.pools[pool.Pool] = pool
	}
	return p, nil
}

// Name is "runpod".
func (p *Provider) Name() string { return ProviderName }

var _ adapters.Provider = (*Provider)(nil)

// retry runs an idempotent call under the configured retry policy.
func (p *Provider) retry(ctx context.Context, fn func(ctx context.Context) error) error {
	return adapters.Retry(ctx, p.cfg.Retry, fn)
}

const queryLowestPrice = `query GpuLowestPrice($id: String!, $price: GpuLowestPriceInput!) {
  gpuTypes(input: {id: $id}) {
    id displayName memoryInGb
    lowestPrice(input: $price) { minimumBidPrice uninterruptablePrice stockStatus minVcpu minMemory }
  }
}`

type gpuType struct {
	ID          string       `json:"id"`
	DisplayName string       `json:"displayName"`
	MemoryInGb  json.Number  `json:"memoryInGb"`
	LowestPrice *lowestPrice `json:"lowestPrice"`
}

type lowestPrice struct {
	MinimumBidPrice      *json.Number `json:"minimumBidPrice"`
	UninterruptablePrice *json.Number `json:"uninterruptablePrice"`
	StockStatus          *string      `json:"stockStatus"`
	MinVcpu              json.Number  `json:"minVcpu"`
	MinMemory            json.Number  `json:"minMemory"`
}

// lowest reads the pool's GPU type and its lowest prices in the pool's
// data centre and cloud.
func (p *Provider) lowest(ctx context.Context, op string, pool PoolConfig) (gpuType, error) {
	var data struct {
		GPUTypes []gpuType `json:"gpuTypes"`
	}
	vars := map[string]any{"id": pool.GPUTypeID, "price": map[string]any{
		"gpuCount": pool.GPUCount, "dataCenterId": pool.DataCenterID, "secureCloud": pool.CloudType == "SECURE"}}
	err := p.retry(ctx, func(ctx context.Context) error { return p.call(ctx, op, pool.Pool, queryLowestPrice, vars, &data) })
	if err != nil {
		return gpuType{}, err
	}
	for _, g := range data.GPUTypes {
		if g.ID == pool.GPUTypeID && g.LowestPrice != nil {
			return g, nil
		}
	}
	return gpuType{}, p.fail(op, pool.Pool, adapters.ErrInvalidRequest, 0, fmt.Errorf("RunPod has no GPU type %q", pool.GPUTypeID))
}

// Offers lists one offer per configured pool. Prices are per pod (per GPU
// × gpu_count); an interruptible pool is priced at its bid. RunPod charges
// no egress.
func (p *Provider) Offers(ctx context.Context) ([]policy.Offer, error) {
	var offers []policy.Offer
	for _, pool := range p.cfg.Pools {
		g, err := p.lowest(ctx, "offers", pool)
		if err != nil {
			if errors.Is(err, adapters.ErrInvalidRequest) {
				p.cfg.Logger.Warn("runpod pool left out of the offers", "pool", pool.Pool, "err", err)
				continue
			}
			return nil, err
		}
		o, why := p.offer(pool, g)
		if why != "" {
			p.cfg.Logger.Warn("runpod pool left out of the offers", "pool", pool.Pool, "reason", why)
			continue
		}
		offers = append(offers, o)
	}
	return offers, nil
}

func (p *Provider) offer(pool PoolConfig, g gpuType) (policy.Offer, string) {
	lp := g.LowestPrice
	zero := policy.Money{Currency: Currency}
	o := policy.Offer{Provider: ProviderName, Pool: pool.Pool, Region: pool.DataCenterID, Country: dataCenterCountries[pool.DataCenterID],
		Card: pool.Card, GPUCount: pool.GPUCount, GPUMemoryGB: atoi(g.MemoryInGb), VCPU: atoi(lp.MinVcpu), MemoryGB: atoi(lp.MinMemory),
		Tier: pool.Tier, EgressPerGB: &zero, Availability: availability(lp.StockStatus)}
	if o.Card == "" {
		o.Card = g.DisplayName
	}
	perGPU, why := p.perGPUPrice(pool, lp)
	if why != "" {
		return policy.Offer{}, why
	}
	o.PricePerHour = policy.Money{Micros: perGPU.Micros * int64(pool.GPUCount), Currency: Currency}
	if pool.Tier == policy.TierSpot && lp.MinimumBidPrice != nil {
		if min, err := adapters.ParsePrice(lp.MinimumBidPrice.String(), Currency); err == nil && perGPU.Micros < min.Micros {
			// Outbid before it starts.
			o.Availability = policy.Unavailable
		}
	}
	return o, ""
}

// perGPUPrice is what one GPU of the pool costs per hour: the on-demand
// price, or the interruptible pool's bid (the configured one, else the
// current minimum bid).
func (p *Provider) perGPUPrice(pool PoolConfig, lp *lowestPrice) (policy.Money, string) {
	var text *json.Number
	switch {
	case pool.Tier == policy.TierOnDemand:
		text = lp.UninterruptablePrice
	case pool.BidPerGPU != "":
		n := json.Number(pool.BidPerGPU)
		text = &n
	default:
		text = lp.MinimumBidPrice
	}
	if text == nil {
		return policy.Money{}, fmt.Sprintf("no %s price for %s in %s", pool.Tier, pool.GPUTypeID, pool.DataCenterID)
	}
	price, err := adapters.ParsePrice(text.String(), Currency)
	if err != nil {
		return policy.Money{}, fmt.Sprintf("price of %s: %v", pool.GPUTypeID, err)
	}
	return price, ""
}

func availability(stock *string) policy.Availability {
	if stock == nil {
		return policy.Unavailable
	}
	switch *stock {
	case "High", "Medium":
		return policy.Available
	case "Low":
		return policy.Scarce
	}
	return policy.AvailabilityUnknown
}

func atoi(n json.Number) int {
	f, err := n.Float64()
	if err != nil {
		return 0
	}
	return int(f)
}

// The pod fields the adapter reads. The environment is never read back: it
// holds the worker's credential.
const podFields = `id name desiredStatus costPerHr runtime { uptimeInSeconds }`

const (
	mutationRent = `mutation Rent($input: PodRentInterruptableInput!) {
  podRentInterruptable(input: $input) { ` + podFields + ` }
}`
	mutationDeploy = `mutation Deploy($input: PodFindAndDeployOnDemandInput!) {
  podFindAndDeployOnDemand(input: $input) { ` + podFields + ` }
}`
	queryPods      = `query Pods { myself { pods { ` + podFields + ` } } }`
	queryPod       = `query Pod($input: PodFilter!) { pod(input: $input) { ` + podFields + ` } }`
	mutationRemove = `mutation Terminate($input: PodTerminateInput!) { podTerminate(input: $input) }`
)

type pod struct {
	ID            string      `json:"id"`
	Name          string      `json:"name"`
	DesiredStatus string      `json:"desiredStatus"`
	CostPerHr     json.Number `json:"costPerHr"`
	Runtime       *struct {
		UptimeInSeconds json.Number `json:"uptimeInSeconds"`
	} `json:"runtime"`
}

// podName carries gpuq's ids, since RunPod pods have no tags and no
// idempotency key: gpuq.<pool>.<client token>.<instance id>.
func podName(req adapters.LaunchRequest) string {
	return "gpuq." + req.Pool + "." + req.ClientToken + "." + req.Boot.InstanceID
}

func parsePodName(name string) (pool, token, instance string, ok bool) {
	parts := strings.Split(name, ".")
	if len(parts) != 4 || parts[0] != "gpuq" {
		return "", "", "", false
	}
	return parts[1], parts[2], parts[3], true
}

// Launch creates a pod for req.Pool from the boot spec's container: an
// interruptible pod bidding the pool's bid (else the current minimum bid)
// or an on-demand one. RunPod takes no idempotency key, so the pod is named
// after the client token and looked for by that name before the first
// create and, after an unknown outcome, before any retry.
func (p *Provider) Launch(ctx context.Context, req adapters.LaunchRequest) (adapters.Instance, error) {
	pool, ok := p.pools[req.Pool]
	if !ok {
		return adapters.Instance{}, p.fail("launch", req.Pool, adapters.ErrInvalidRequest, 0, fmt.Errorf("no runpod pool %q", req.Pool))
	}
	if req.Boot.Notice == "" {
		req.Boot.Notice = adapters.NoticeSIGTERM
	}
	// The worker learns RunPod's 5 s between SIGTERM and SIGKILL from its
	// provider.
	req.Boot.WorkerArgs = append(append([]string(nil), req.Boot.WorkerArgs...), "--provider", ProviderName)
	if req.Boot.Image == "" {
		req.Boot.Image = pool.Image
	}
	c, err := req.Boot.Container()
	if err != nil {
		return adapters.Instance{}, p.fail("launch", req.Pool, adapters.ErrInvalidRequest, 0, fmt.Errorf("boot.%w", err))
	}
	var env []map[string]string
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		env = append(env, map[string]string{"key": k, "value": c.Env[k]})
	}
	input := map[string]any{
		"name": podName(req), "imageName": c.Image, "gpuTypeId": pool.GPUTypeID, "gpuCount": pool.GPUCount,
		"cloudType": pool.CloudType, "dataCenterId": pool.DataCenterID, "containerDiskInGb": pool.ContainerDiskGB,
		"volumeInGb": 0, "env": env, "dockerArgs": strings.Join(c.Command, " "),
	}
	if pool.MinVCPU > 0 {
		input["minVcpuCount"] = pool.MinVCPU
	}
	if pool.MinMemoryGB > 0 {
		input["minMemoryInGb"] = pool.MinMemoryGB
	}
	mutation, field := mutationDeploy, "podFindAndDeployOnDemand"
	if pool.Tier == policy.TierSpot {
		mutation, field = mutationRent, "podRentInterruptable"
	}
	create := func(ctx context.Context) (adapters.Instance, error) {
		if pool.Tier == policy.TierSpot {
			bid := pool.BidPerGPU
			if bid == "" {
				// The minimum bid moves: read it now, as close to the
				// rent as possible.
				g, err := p.lowest(ctx, "launch", pool)
				if err != nil {
					return adapters.Instance{}, err
				}
				if g.LowestPrice.MinimumBidPrice == nil {
					return adapters.Instance{}, p.fail("launch", req.Pool, adapters.ErrCapacityUnavailable, 0, errors.New("no minimum bid: no interruptible capacity"))
				}
				bid = g.LowestPrice.MinimumBidPrice.String()
			}
			input["bidPerGpu"] = json.Number(bid)
		}
		var data map[string]*pod
		if err := p.call(ctx, "launch", req.Pool, mutation, map[string]any{"input": input}, &data); err != nil {
			return adapters.Instance{}, err
		}
		got := data[field]
		if got == nil || got.ID == "" {
			// RunPod answers a rent it cannot place with a null pod.
			return adapters.Instance{}, p.fail("launch", req.Pool, adapters.ErrCapacityUnavailable, 0, errors.New("no pod returned"))
		}
		return p.instance(*got), nil
	}
	find := func(ctx context.Context, token string) (adapters.Instance, bool, error) {
		found, err := p.Instances(ctx, adapters.InstanceFilter{ClientToken: token, IncludeGone: true})
		if err != nil || len(found) == 0 {
			return adapters.Instance{}, false, err
		}
		return found[0], true, nil
	}
	// A repeated launch (the caller retrying after its own timeout) finds
	// the pod the first one rented.
	if inst, ok, err := find(ctx, req.ClientToken); err != nil || ok {
		return inst, err
	}
	return adapters.LaunchIdempotent(ctx, p.cfg.Retry, req, create, find)
}

// Instances lists the account's pods that gpuq named. RunPod's pod list is
// not paginated.
func (p *Provider) Instances(ctx context.Context, f adapters.InstanceFilter) ([]adapters.Instance, error) {
	var data struct {
		Myself struct {
			Pods []pod `json:"pods"`
		} `json:"myself"`
	}
	if err := p.retry(ctx, func(ctx context.Context) error { return p.call(ctx, "list", f.Pool, queryPods, nil, &data) }); err != nil {
		return nil, err
	}
	var out []adapters.Instance
	for _, raw := range data.Myself.Pods {
		if _, _, _, ok := parsePodName(raw.Name); !ok {
			continue
		}
		if inst := p.instance(raw); f.Match(inst) {
			out = append(out, inst)
		}
	}
	return out, nil
}

// Describe reads one pod.
func (p *Provider) Describe(ctx context.Context, id string) (adapters.Instance, error) {
	var data struct {
		Pod *pod `json:"pod"`
	}
	err := p.retry(ctx, func(ctx context.Context) error {
		return p.call(ctx, "describe", "", queryPod, map[string]any{"input": map[string]string{"podId": id}}, &data)
	})
	if err != nil {
		return adapters.Instance{}, err
	}
	if data.Pod == nil {
		return adapters.Instance{}, p.fail("describe", "", adapters.ErrNotFound, 0, fmt.Errorf("pod %s", id))
	}
	return p.instance(*data.Pod), nil
}

// Terminate ends a pod for good (podTerminate; podStop would keep billing
// its disk). A pod RunPod no longer knows is done.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	err := p.retry(ctx, func(ctx context.Context) error {
		return p.call(ctx, "terminate", "", mutationRemove, map[string]any{"input": map[string]string{"podId": id}}, nil)
	})
	if errors.Is(err, adapters.ErrNotFound) {
		return nil
	}
	return err
}

// instance converts a pod. RunPod stops an outbid interruptible pod
// (desiredStatus EXITED), and gpuq never stops its pods, only terminates
// them: an EXITED pod of a spot pool was preempted.
func (p *Provider) instance(raw pod) adapters.Instance {
	inst := adapters.Instance{Provider: ProviderName, ProviderID: raw.ID, Reason: raw.DesiredStatus}
	if pool, token, id, ok := parsePodName(raw.Name); ok {
		inst.Pool, inst.ClientToken = pool, token
		inst.Tags = map[string]string{adapters.TagManagedBy: adapters.ManagedBy, adapters.TagPool: pool,
			adapters.TagClientToken: token, adapters.TagInstance: id}
	}
	switch raw.DesiredStatus {
	case "RUNNING":
		inst.State = adapters.StatePending
		if raw.Runtime != nil {
			inst.State = adapters.StateRunning
			up, _ := raw.Runtime.UptimeInSeconds.Int64()
			inst.LaunchedAt = time.Now().Add(-time.Duration(up) * time.Second).Truncate(time.Second)
		}
	case "CREATED", "RESTARTING":
		inst.State = adapters.StatePending
	case "EXITED", "PAUSED", "DEAD":
		inst.State = adapters.StateStopping
		if p.pools[inst.Pool].Tier == policy.TierSpot {
			inst.State = adapters.StatePreempted
		}
	case "TERMINATED":
		inst.State = adapters.StateTerminated
	default:
		inst.State = adapters.StatePending
	}
	if price, err := adapters.ParsePrice(raw.CostPerHr.String(), Currency); err == nil {
		inst.PricePerHour = price
	} else {
		inst.PricePerHour = policy.Money{Currency: Currency}
	}
	return inst
}
