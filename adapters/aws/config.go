package aws

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
)

// ProviderName is the provider's name in offers and pools.
const ProviderName = "aws"

// Currency is the currency EC2 prices in.
const Currency = "USD"

// Config configures the EC2 adapter.
type Config struct {
	// AccessKeyID and SecretAccessKey sign requests; SessionToken is set for
	// temporary credentials. Default: the environment's AWS_ACCESS_KEY_ID,
	// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN. Never put them on a
	// command line; the secrets are redacted wherever they are printed.
	AccessKeyID     string
	SecretAccessKey adapters.Secret
	SessionToken    adapters.Secret
	// Endpoint replaces the EC2 endpoint of every region (the SDK's
	// BaseEndpoint): an interface VPC endpoint, or a fake in tests.
	// Default: the SDK's regional endpoint.
	Endpoint string
	// Pools are the pools the adapter offers and launches into. Required.
	Pools []PoolConfig
	// ProductDescription selects the spot prices read. Default "Linux/UNIX".
	ProductDescription string
	// Retry bounds retries of each EC2 call (the SDK's own retries are
	// off, so that rate limits and unknown launch outcomes are handled once,
	// here). Defaults: adapters.RetryConfig's.
	Retry adapters.RetryConfig
	// HTTPClient carries the requests. Default: the SDK's.
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// PoolConfig is one pool: an instance type in a region, spot or on-demand.
type PoolConfig struct {
	Pool   string `mapstructure:"pool"`
	Region string `mapstructure:"region"`
	// InstanceType such as p5.48xlarge. The pool's card, GPU count and
	// memory, vCPUs and RAM are read from DescribeInstanceTypes.
	InstanceType string      `mapstructure:"instance_type"`
	Tier         policy.Tier `mapstructure:"tier"`
	// Zone pins the pool to one availability zone (eu-central-1a). Default:
	// any standard zone of the region that offers the type; a spot launch
	// goes to the cheapest of them.
	Zone string `mapstructure:"zone"`
	// OnDemandPrice is the on-demand price per hour in USD ("98.32"). EC2's
	// API has no price call (AWS's Price List is a separate service), so it
	// comes from configuration. Required for on-demand pools; for spot
	// pools it is optional and, when set, caps the spot price (MaxPrice).
	OnDemandPrice string `mapstructure:"on_demand_price"`
	// EgressPerGB is the data transfer out price per GB in USD; empty
	// leaves it unknown.
	EgressPerGB string `mapstructure:"egress_per_gb"`
	// Card overrides the GPU name DescribeInstanceTypes gives ("H100").
	Card string `mapstructure:"card"`
	// ImageID is the AMI the worker boots (with gpuq and its systemd unit
	// installed, see deploy/). Required.
	ImageID string `mapstructure:"image_id"`
	// SubnetID, SecurityGroupIDs and InstanceProfile place the instance in
	// the network and give it its IAM role; empty ones use the account's
	// defaults.
	SubnetID         string   `mapstructure:"subnet_id"`
	SecurityGroupIDs []string `mapstructure:"security_group_ids"`
	InstanceProfile  string   `mapstructure:"instance_profile"`
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.AccessKeyID == "" && c.SecretAccessKey.IsZero() {
		c.AccessKeyID = os.Getenv("AWS_ACCESS_KEY_ID")
		c.SecretAccessKey = adapters.NewSecret(os.Getenv("AWS_SECRET_ACCESS_KEY"))
		c.SessionToken = adapters.NewSecret(os.Getenv("AWS_SESSION_TOKEN"))
	}
	if c.ProductDescription == "" {
		c.ProductDescription = "Linux/UNIX"
	}
	c.Retry = c.Retry.WithDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if c.AccessKeyID == "" || c.SecretAccessKey.IsZero() {
		return fmt.Errorf("aws.access_key_id, aws.secret_access_key: must be set (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
			return fmt.Errorf("aws.endpoint: want an http(s) URL with a host and no user, got %q", c.Endpoint)
		}
	}
	if err := c.Retry.Validate(); err != nil {
		return fmt.Errorf("aws.retry.%w", err)
	}
	if len(c.Pools) == 0 {
		return fmt.Errorf("aws.pools: at least one pool is required")
	}
	seen := map[string]bool{}
	for i, p := range c.Pools {
		field := fmt.Sprintf("aws.pools[%d]", i)
		if !policy.ValidPool(p.Pool) {
			return fmt.Errorf("%s.pool: %q must match ^[A-Za-z0-9_-]+$", field, p.Pool)
		}
		if seen[p.Pool] {
			return fmt.Errorf("%s.pool: %q appears twice", field, p.Pool)
		}
		seen[p.Pool] = true
		if !validRegion(p.Region) {
			return fmt.Errorf("%s.region: want an AWS region such as eu-central-1, got %q", field, p.Region)
		}
		if p.InstanceType == "" || strings.ContainsAny(p.InstanceType, " \t\n/") || len(p.InstanceType) > 64 {
			return fmt.Errorf("%s.instance_type: want an EC2 instance type such as p5.48xlarge, got %q", field, p.InstanceType)
		}
		if p.Tier != policy.TierSpot && p.Tier != policy.TierOnDemand {
			return fmt.Errorf("%s.tier: must be spot or on-demand, got %q", field, p.Tier)
		}
		if p.Zone != "" && !strings.HasPrefix(p.Zone, p.Region) {
			return fmt.Errorf("%s.zone: %q is not a zone of region %s", field, p.Zone, p.Region)
		}
		if p.Tier == policy.TierOnDemand && p.OnDemandPrice == "" {
			return fmt.Errorf("%s.on_demand_price: required for an on-demand pool (EC2 has no price call)", field)
		}
		if p.OnDemandPrice != "" {
			if _, err := adapters.ParsePrice(p.OnDemandPrice, Currency); err != nil {
				return fmt.Errorf("%s.on_demand_price: %w", field, err)
			}
		}
		if p.EgressPerGB != "" {
			if _, err := adapters.ParsePrice(p.EgressPerGB, Currency); err != nil {
				return fmt.Errorf("%s.egress_per_gb: %w", field, err)
			}
		}
		if !strings.HasPrefix(p.ImageID, "ami-") {
			return fmt.Errorf("%s.image_id: want an AMI id such as ami-0abc…, got %q", field, p.ImageID)
		}
	}
	return nil
}

func validRegion(r string) bool {
	if r == "" || len(r) > 32 {
		return false
	}
	for i := 0; i < len(r); i++ {
		c := r[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
