package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/policy/spot"
)

// ProviderName is the provider name of every simulated offer.
const ProviderName = "sim"

// PoolConfig is one simulated pool, as written under the config key
// `sim.pools`.
type PoolConfig struct {
	// Pool names the pool; it must match ^[A-Za-z0-9_-]+$.
	Pool   string `json:"pool" yaml:"pool" mapstructure:"pool"`
	Region string `json:"region" yaml:"region" mapstructure:"region"`
	// Country is the ISO 3166-1 alpha-2 code of the region.
	Country     string `json:"country" yaml:"country" mapstructure:"country"`
	Card        string `json:"card" yaml:"card" mapstructure:"card"`
	GPUCount    int    `json:"gpu_count" yaml:"gpu_count" mapstructure:"gpu_count"`
	GPUMemoryGB int    `json:"gpu_memory_gb" yaml:"gpu_memory_gb" mapstructure:"gpu_memory_gb"`
	VCPU        int    `json:"vcpu" yaml:"vcpu" mapstructure:"vcpu"`
	MemoryGB    int    `json:"memory_gb" yaml:"memory_gb" mapstructure:"memory_gb"`
	// Tier is spot or on-demand; default on-demand.
	Tier string `json:"tier" yaml:"tier" mapstructure:"tier"`
	// PricePerHour is a decimal amount in Currency, such as "0.92".
	PricePerHour string `json:"price_per_hour" yaml:"price_per_hour" mapstructure:"price_per_hour"`
	// Currency is an ISO 4217 code; default USD (the traces' cloud).
	Currency string `json:"currency" yaml:"currency" mapstructure:"currency"`
	// Trace is the availability trace of a spot pool, a file under the
	// traces directory; its value at each tick is the number of instances
	// the pool can hold. Empty: Capacity instances at all times.
	Trace string `json:"trace" yaml:"trace" mapstructure:"trace"`
	// Capacity bounds the instances of a pool without a trace; 0 means
	// no bound.
	Capacity int `json:"capacity" yaml:"capacity" mapstructure:"capacity"`
	// BootDelay is the virtual time from launch to a running worker.
	// Default 60s.
	BootDelay time.Duration `json:"boot_delay" yaml:"boot_delay" mapstructure:"boot_delay"`
	// Notice is how a preempted worker is warned: sigterm (default) or
	// none (killed outright).
	Notice string `json:"notice" yaml:"notice" mapstructure:"notice"`
	// Grace is the real time between the notice and SIGKILL: real, since
	// the worker and its job are real processes. Default 10s.
	Grace time.Duration `json:"grace" yaml:"grace" mapstructure:"grace"`
	// MaxDuration is the virtual time after which the cloud ends an
	// instance, with its notice, as providers with a runtime cap do; 0
	// means none. The pool's offer states it.
	MaxDuration time.Duration `json:"max_duration" yaml:"max_duration" mapstructure:"max_duration"`
}

// Config is a simulated cloud.
type Config struct {
	Pools []PoolConfig
	// TracesDir holds the pools' trace files.
	TracesDir string
	// Speed is virtual seconds per real second; default 1. At 320 a
	// 32-second trace tick lasts 100 ms.
	Speed float64
	// Start is how far into the traces the virtual clock starts; default 0.
	// Past a trace's end it starts over.
	Start time.Duration
	// Step is how often (real time) the cloud updates capacity, boots and
	// preemptions; default 50ms.
	Step time.Duration
	// PageSize is the most items one page of a listing holds; default 100.
	PageSize int
}

// WithDefaults fills the zero fields with their defaults.
func (c Config) WithDefaults() Config {
	if c.Speed == 0 {
		c.Speed = 1
	}
	if c.Step == 0 {
		c.Step = 50 * time.Millisecond
	}
	if c.PageSize == 0 {
		c.PageSize = 100
	}
	c.Pools = slices.Clone(c.Pools)
	for i := range c.Pools {
		p := &c.Pools[i]
		if p.Tier == "" {
			p.Tier = string(policy.TierOnDemand)
		}
		if p.Currency == "" {
			p.Currency = "USD"
		}
		if p.BootDelay == 0 {
			p.BootDelay = time.Minute
		}
		if p.Notice == "" {
			p.Notice = string(adapters.NoticeSIGTERM)
		}
		if p.Grace == 0 {
			p.Grace = 10 * time.Second
		}
	}
	return c
}

// pool is a validated pool with its offer and trace.
type pool struct {
	PoolConfig
	offer policy.Offer
	trace *spot.Trace
}

// validate checks the config, naming the field at fault, and reads the
// traces.
func (c Config) validate() ([]*pool, error) {
	switch {
	case !(c.Speed > 0) || c.Speed > 1e6:
		return nil, fmt.Errorf("speed: must be more than 0 and at most 1e6, got %v", c.Speed)
	case c.Start < 0:
		return nil, fmt.Errorf("start: must not be negative, got %s", c.Start)
	case c.Step < time.Millisecond:
		return nil, fmt.Errorf("step: must be at least 1ms, got %s", c.Step)
	case c.PageSize < 1:
		return nil, fmt.Errorf("page_size: must be at least 1, got %d", c.PageSize)
	case len(c.Pools) == 0:
		return nil, fmt.Errorf("pools: name at least one pool")
	}
	var pools []*pool
	seen := map[string]int{}
	for i, pc := range c.Pools {
		key := fmt.Sprintf("pools[%d]", i)
		if j, dup := seen[pc.Pool]; dup {
			return nil, fmt.Errorf("%s.pool: %q is already the name of pools[%d]", key, pc.Pool, j)
		}
		seen[pc.Pool] = i
		p, err := c.pool(key, pc)
		if err != nil {
			return nil, err
		}
		pools = append(pools, p)
	}
	return pools, nil
}

func (c Config) pool(key string, pc PoolConfig) (*pool, error) {
	o := policy.Offer{
		Provider: ProviderName, Pool: pc.Pool, Region: pc.Region, Country: pc.Country, Card: pc.Card,
		GPUCount: pc.GPUCount, GPUMemoryGB: pc.GPUMemoryGB, VCPU: pc.VCPU, MemoryGB: pc.MemoryGB,
		Tier: policy.Tier(pc.Tier), Availability: policy.Available, MaxDuration: pc.MaxDuration,
	}
	if pc.Region == "" {
		return nil, fmt.Errorf("%s.region: must be set", key)
	}
	if len(pc.Country) != 2 || strings.ToUpper(pc.Country) != pc.Country {
		return nil, fmt.Errorf("%s.country: want an ISO 3166-1 alpha-2 code such as DE, got %q", key, pc.Country)
	}
	if pc.Card == "" {
		return nil, fmt.Errorf("%s.card: must be set (\"cpu\" for a pool without GPUs)", key)
	}
	price, err := adapters.ParsePrice(pc.PricePerHour, pc.Currency)
	if err != nil {
		return nil, fmt.Errorf("%s.price_per_hour, %s.currency: %w", key, key, err)
	}
	o.PricePerHour = price
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("%s.%w", key, err)
	}
	if pc.Capacity < 0 {
		return nil, fmt.Errorf("%s.capacity: must be 0 (no bound) or more, got %d", key, pc.Capacity)
	}
	if pc.BootDelay < 0 {
		return nil, fmt.Errorf("%s.boot_delay: must not be negative, got %s", key, pc.BootDelay)
	}
	if pc.MaxDuration < 0 {
		return nil, fmt.Errorf("%s.max_duration: must be 0 (none) or more, got %s", key, pc.MaxDuration)
	}
	if pc.Grace <= 0 {
		return nil, fmt.Errorf("%s.grace: must be positive, got %s", key, pc.Grace)
	}
	switch adapters.NoticeSource(pc.Notice) {
	case adapters.NoticeSIGTERM, adapters.NoticeNone:
	default:
		return nil, fmt.Errorf("%s.notice: the simulated cloud warns with sigterm or none, got %q", key, pc.Notice)
	}
	p := &pool{PoolConfig: pc, offer: o}
	if pc.Trace != "" {
		if o.Tier != policy.TierSpot {
			return nil, fmt.Errorf("%s.trace: only a spot pool follows a trace (tier is %s)", key, o.Tier)
		}
		if c.TracesDir == "" {
			return nil, fmt.Errorf("%s.trace: no traces directory given (--traces)", key)
		}
		if !filepath.IsLocal(pc.Trace) {
			return nil, fmt.Errorf("%s.trace: %q must be a path inside the traces directory", key, pc.Trace)
		}
		t, err := readTrace(filepath.Join(c.TracesDir, pc.Trace))
		if err != nil {
			return nil, fmt.Errorf("%s.trace: %w", key, err)
		}
		p.trace = &t
		rate := preemptionRate(t)
		p.offer.PreemptionRate = &rate
	}
	return p, nil
}

// maxTraceBytes bounds a trace file; the published ones are under 100 KiB.
const maxTraceBytes = 16 << 20

func readTrace(path string) (spot.Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return spot.Trace{}, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > maxTraceBytes {
		return spot.Trace{}, fmt.Errorf("%s: %d bytes, more than the %d a trace may have", path, st.Size(), maxTraceBytes)
	}
	return spot.DecodeTrace(f, filepath.Base(path))
}

// preemptionRate is the trace's preemptions (ticks where capacity falls)
// per hour that capacity was up: what the pool's offer states.
func preemptionRate(t spot.Trace) float64 {
	drops, up := 0, 0
	for k, n := range t.Avail {
		if n > 0 {
			up++
		}
		if k > 0 && n < t.Avail[k-1] {
			drops++
		}
	}
	if up == 0 {
		return 0
	}
	return float64(drops) / (float64(up) * t.Gap.Hours())
}
