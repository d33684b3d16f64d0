package aws

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
)

// Provider is the EC2 adapter: one SDK client per configured region.
type Provider struct {
	cfg     Config
	pools   map[string]PoolConfig
	clients map[string]*ec2.Client

	mu     sync.Mutex
	prices map[spotKey]spotPrice
}

// spotKey names one spot market: an instance type in a zone.
type spotKey struct{ instanceType, zone string }

type spotPrice struct {
	price policy.Money
	read  time.Time
}

// spotPriceTTL is how long a spot price read for an instance's charge is
// reused.
const spotPriceTTL = time.Minute

// New returns the adapter for cfg.
func New(cfg Config) (*Provider, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Provider{cfg: cfg, pools: map[string]PoolConfig{}, clients: map[string]*ec2.Client{}, prices: map[spotKey]spotPrice{}}
	creds := awssdk.Credentials{AccessKeyID: cfg.AccessKeyID, SecretAccessKey: cfg.SecretAccessKey.Reveal(),
		SessionToken: cfg.SessionToken.Reveal(), Source: "gpuq configuration"}
	for _, pool := range cfg.Pools {
		p.pools[pool.Pool] = pool
		if _, ok := p.clients[pool.Region]; ok {
			continue
		}
		opts := ec2.Options{
			Region: pool.Region,
			Credentials: awssdk.CredentialsProviderFunc(func(context.Context) (awssdk.Credentials, error) {
				return creds, nil
			}),
			// gpuq retries itself (adapters.Retry, LaunchIdempotent), so
			// that a rate limit or an unknown launch outcome is handled
			// once and a launch is never blindly repeated.
			Retryer: awssdk.NopRetryer{},
		}
		if cfg.Endpoint != "" {
			opts.BaseEndpoint = awssdk.String(cfg.Endpoint)
		}
		if cfg.HTTPClient != nil {
			opts.HTTPClient = cfg.HTTPClient
		}
		p.clients[pool.Region] = ec2.New(opts)
	}
	return p, nil
}

// Name is "aws".
func (p *Provider) Name() string { return ProviderName }

// regions lists the configured regions in a stable order.
func (p *Provider) regions() []string {
	var rs []string
	for _, pool := range p.cfg.Pools {
		if !containsString(rs, pool.Region) {
			rs = append(rs, pool.Region)
		}
	}
	return rs
}

func containsString(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// providerID joins region and instance id: an EC2 instance id does not say
// which region it lives in.
func providerID(region, instanceID string) string { return region + "/" + instanceID }

func splitProviderID(id string) (region, instanceID string, err error) {
	region, instanceID, ok := strings.Cut(id, "/")
	if !ok || !validRegion(region) || !strings.HasPrefix(instanceID, "i-") {
		return "", "", fmt.Errorf("instance %q: want region/i-…", id)
	}
	return region, instanceID, nil
}

// retry runs an idempotent EC2 call under the configured retry policy,
// mapping its errors.
func (p *Provider) retry(ctx context.Context, op, pool string, fn func(ctx context.Context) error) error {
	return adapters.Retry(ctx, p.cfg.Retry, func(ctx context.Context) error { return fail(op, pool, fn(ctx)) })
}

var _ adapters.Provider = (*Provider)(nil)
