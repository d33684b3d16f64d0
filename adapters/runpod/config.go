package runpod

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
)

// ProviderName is the provider's name in offers and pools.
const ProviderName = "runpod"

// Currency is the currency RunPod prices in.
const Currency = "USD"

// DefaultEndpoint is RunPod's GraphQL API.
const DefaultEndpoint = "https://api.runpod.io/graphql"

// Config configures the RunPod adapter.
type Config struct {
	// APIKey authenticates every request (sent as a bearer token, never in
	// a URL). Default: the environment's RUNPOD_API_KEY. Redacted wherever
	// it is printed.
	APIKey adapters.Secret
	// Endpoint is the GraphQL endpoint. Default DefaultEndpoint; tests
	// point it at a fake.
	Endpoint string
	// Pools are the pools the adapter offers and launches into. Required.
	Pools []PoolConfig
	// Retry bounds retries of each call. Defaults: adapters.RetryConfig's.
	Retry      adapters.RetryConfig
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// PoolConfig is one pool: a GPU type and count in one data centre, secure
// or community cloud, interruptible (spot) or on-demand.
type PoolConfig struct {
	Pool string `mapstructure:"pool"`
	// GPUTypeID is RunPod's GPU type id ("NVIDIA H100 80GB HBM3").
	GPUTypeID string `mapstructure:"gpu_type_id"`
	// Card is the card's name for placement ("H100"). Default: the GPU
	// type's display name.
	Card string `mapstructure:"card"`
	// GPUCount per pod. Default 1.
	GPUCount int `mapstructure:"gpu_count"`
	// DataCenterID such as EU-RO-1; it must be one whose country gpuq
	// knows (see dataCenterCountries).
	DataCenterID string `mapstructure:"data_center_id"`
	// CloudType is SECURE or COMMUNITY. Default SECURE.
	CloudType string      `mapstructure:"cloud_type"`
	Tier      policy.Tier `mapstructure:"tier"`
	// BidPerGPU is the interruptible pod's bid per GPU and hour in USD
	// ("0.95"). Empty: bid the current minimum bid. A bid below the
	// minimum makes the pool unavailable.
	BidPerGPU string `mapstructure:"bid_per_gpu"`
	// MinVCPU and MinMemoryGB per pod; zero leaves RunPod's defaults.
	MinVCPU     int `mapstructure:"min_vcpu"`
	MinMemoryGB int `mapstructure:"min_memory_gb"`
	// ContainerDiskGB of the pod. Default 50.
	ContainerDiskGB int `mapstructure:"container_disk_gb"`
	// Image is the worker's container image when the boot spec names none.
	Image string `mapstructure:"image"`
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.APIKey.IsZero() {
		c.APIKey = adapters.NewSecret(os.Getenv("RUNPOD_API_KEY"))
	}
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	c.Retry = c.Retry.WithDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	pools := make([]PoolConfig, len(c.Pools))
	for i, p := range c.Pools {
		if p.GPUCount == 0 {
			p.GPUCount = 1
		}
		if p.CloudType == "" {
			p.CloudType = "SECURE"
		}
		if p.ContainerDiskGB == 0 {
			p.ContainerDiskGB = 50
		}
		pools[i] = p
	}
	c.Pools = pools
	return c
}

func (c Config) validate() error {
	if c.APIKey.IsZero() {
		return fmt.Errorf("runpod.api_key: must be set (or RUNPOD_API_KEY)")
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" {
		return fmt.Errorf("runpod.endpoint: want an http(s) URL with a host and no user or query, got %q", c.Endpoint)
	}
	if err := c.Retry.Validate(); err != nil {
		return fmt.Errorf("runpod.retry.%w", err)
	}
	if len(c.Pools) == 0 {
		return fmt.Errorf("runpod.pools: at least one pool is required")
	}
	seen := map[string]bool{}
	for i, p := range c.Pools {
		field := fmt.Sprintf("runpod.pools[%d]", i)
		switch {
		case !policy.ValidPool(p.Pool):
			return fmt.Errorf("%s.pool: %q must match ^[A-Za-z0-9_-]+$", field, p.Pool)
		case seen[p.Pool]:
			return fmt.Errorf("%s.pool: %q appears twice", field, p.Pool)
		case p.GPUTypeID == "" || len(p.GPUTypeID) > 128 || strings.ContainsAny(p.GPUTypeID, "\"\\\n"):
			return fmt.Errorf("%s.gpu_type_id: want a RunPod GPU type id such as \"NVIDIA H100 80GB HBM3\", got %q", field, p.GPUTypeID)
		case p.GPUCount < 1 || p.GPUCount > 16:
			return fmt.Errorf("%s.gpu_count: must be 1–16, got %d", field, p.GPUCount)
		case p.CloudType != "SECURE" && p.CloudType != "COMMUNITY":
			return fmt.Errorf("%s.cloud_type: must be SECURE or COMMUNITY, got %q", field, p.CloudType)
		case p.Tier != policy.TierSpot && p.Tier != policy.TierOnDemand:
			return fmt.Errorf("%s.tier: must be spot or on-demand, got %q", field, p.Tier)
		case p.MinVCPU < 0 || p.MinMemoryGB < 0 || p.ContainerDiskGB < 1:
			return fmt.Errorf("%s: min_vcpu and min_memory_gb must be 0 or more, container_disk_gb at least 1", field)
		}
		seen[p.Pool] = true
		if _, ok := dataCenterCountries[p.DataCenterID]; !ok {
			return fmt.Errorf("%s.data_center_id: %q is not a RunPod data centre whose country gpuq knows", field, p.DataCenterID)
		}
		if p.BidPerGPU != "" {
			if p.Tier != policy.TierSpot {
				return fmt.Errorf("%s.bid_per_gpu: only an interruptible (spot) pool bids", field)
			}
			if _, err := adapters.ParsePrice(p.BidPerGPU, Currency); err != nil {
				return fmt.Errorf("%s.bid_per_gpu: %w", field, err)
			}
		}
	}
	return nil
}

// dataCenterCountries maps RunPod data centre ids to their country, as the
// ids spell it. A data centre missing here cannot be configured: residency
// is never guessed.
var dataCenterCountries = map[string]string{
	"EU-RO-1":  "RO",
	"EU-SE-1":  "SE",
	"EU-NL-1":  "NL",
	"EU-CZ-1":  "CZ",
	"EU-FR-1":  "FR",
	"EUR-IS-1": "IS",
	"EUR-IS-2": "IS",
	"EUR-IS-3": "IS",
	"EUR-NO-1": "NO",
	"US-GA-1":  "US",
	"US-GA-2":  "US",
	"US-IL-1":  "US",
	"US-KS-2":  "US",
	"US-TX-3":  "US",
	"US-CA-2":  "US",
	"CA-MTL-1": "CA",
	"CA-MTL-3": "CA",
	"AP-JP-1":  "JP",
}
