package local

import (
	"context"
	"fmt"
	"sync"

	"github.com/gpuq/gpuq/policy"
)

// ProviderName is the provider name of every local offer.
const ProviderName = "local"

// PoolConfig is one local pool, as written under the config key `pools`.
// Prices are decimal strings in Currency so that the config decodes without
// custom hooks.
type PoolConfig struct {
	// Pool names the pool; it must match ^[A-Za-z0-9_-]+$.
	Pool   string `json:"pool" yaml:"pool" mapstructure:"pool"`
	Region string `json:"region" yaml:"region" mapstructure:"region"`
	// Country is the ISO 3166-1 alpha-2 code the pool claims to be in.
	Country     string `json:"country" yaml:"country" mapstructure:"country"`
	Card        string `json:"card" yaml:"card" mapstructure:"card"`
	GPUCount    int    `json:"gpu_count" yaml:"gpu_count" mapstructure:"gpu_count"`
	GPUMemoryGB int    `json:"gpu_memory_gb" yaml:"gpu_memory_gb" mapstructure:"gpu_memory_gb"`
	VCPU        int    `json:"vcpu" yaml:"vcpu" mapstructure:"vcpu"`
	MemoryGB    int    `json:"memory_gb" yaml:"memory_gb" mapstructure:"memory_gb"`
	// Tier is spot or on-demand; default on-demand.
	Tier string `json:"tier" yaml:"tier" mapstructure:"tier"`
	// PricePerHour is a decimal amount such as "1.20"; default "0".
	PricePerHour string `json:"price_per_hour" yaml:"price_per_hour" mapstructure:"price_per_hour"`
	// Currency is an ISO 4217 code; default EUR.
	Currency string `json:"currency" yaml:"currency" mapstructure:"currency"`
	// EgressPerGB is a decimal amount in Currency; empty means unknown.
	EgressPerGB string `json:"egress_per_gb" yaml:"egress_per_gb" mapstructure:"egress_per_gb"`
	// Canary holds the worker canary's expectations for this pool (see
	// the README's GPU canary section); placement ignores it.
	Canary map[string]any `json:"canary,omitempty" yaml:"canary" mapstructure:"canary"`
	// PreemptionRate is the simulated preemptions per hour of a spot pool.
	PreemptionRate *float64 `json:"preemption_rate" yaml:"preemption_rate" mapstructure:"preemption_rate"`
}

// Offer converts the pool into an offer, naming key in any error.
func (c PoolConfig) Offer(key string) (policy.Offer, error) {
	currency := c.Currency
	if currency == "" {
		currency = "EUR"
	}
	price := c.PricePerHour
	if price == "" {
		price = "0"
	}
	tier := policy.Tier(c.Tier)
	if tier == "" {
		tier = policy.TierOnDemand
	}
	o := policy.Offer{
		Provider: ProviderName, Pool: c.Pool, Region: c.Region,
		Card: c.Card, GPUCount: c.GPUCount, GPUMemoryGB: c.GPUMemoryGB, VCPU: c.VCPU, MemoryGB: c.MemoryGB,
		Tier: tier, Availability: policy.Available, PreemptionRate: c.PreemptionRate,
	}
	if c.Region == "" {
		return o, fmt.Errorf("%s.region: must be set", key)
	}
	country, err := policy.NormalizeCountry(c.Country)
	if err != nil || country == "" {
		return o, fmt.Errorf("%s.country: want an ISO 3166-1 alpha-2 code such as DE, got %q", key, c.Country)
	}
	o.Country = country
	if c.Card == "" {
		return o, fmt.Errorf("%s.card: must be set (\"cpu\" for a pool without GPUs)", key)
	}
	if o.PricePerHour, err = policy.ParseMoney(price + " " + currency); err != nil {
		return o, fmt.Errorf("%s.price_per_hour, %s.currency: %w", key, key, err)
	}
	if c.EgressPerGB != "" {
		egress, err := policy.ParseMoney(c.EgressPerGB + " " + currency)
		if err != nil {
			return o, fmt.Errorf("%s.egress_per_gb: %w", key, err)
		}
		o.EgressPerGB = &egress
	}
	if err := o.Validate(); err != nil {
		return o, fmt.Errorf("%s.%w", key, err)
	}
	return o, nil
}

// Provider is the local provider: one offer per configured pool, always
// available, and, when Workers is set, instances that are worker processes
// on this machine.
type Provider struct {
	offers []policy.Offer
	// Workers starts the processes of launched instances; nil refuses
	// launches.
	Workers *Launcher

	mu        sync.Mutex
	instances map[string]*managed // by provider id
	byToken   map[string]string   // client token → provider id
}

// New checks pools and returns the provider; errors name the key, as in
// `pools[1].country: …`.
func New(pools []PoolConfig) (*Provider, error) {
	p := &Provider{}
	seen := map[string]int{}
	for i, c := range pools {
		key := fmt.Sprintf("pools[%d]", i)
		o, err := c.Offer(key)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[o.Pool]; dup {
			return nil, fmt.Errorf("%s.pool: %q is already the name of pools[%d]", key, o.Pool, j)
		}
		seen[o.Pool] = i
		p.offers = append(p.offers, o)
	}
	return p, nil
}

// Name returns "local".
func (p *Provider) Name() string { return ProviderName }

// Offers returns one offer per pool.
func (p *Provider) Offers(ctx context.Context) ([]policy.Offer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]policy.Offer, len(p.offers))
	copy(out, p.offers)
	return out, nil
}
