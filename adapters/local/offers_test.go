package local_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/policy"
)

var _ adapters.OfferSource = (*local.Provider)(nil)

func pool() local.PoolConfig {
	return local.PoolConfig{Pool: "dev-gpu", Region: "home", Country: "de", Card: "L4", GPUCount: 1, GPUMemoryGB: 24,
		VCPU: 8, MemoryGB: 32, Tier: "spot", PricePerHour: "0.40", Currency: "EUR", EgressPerGB: "0.01"}
}

func TestProviderOffersItsPools(t *testing.T) {
	t.Parallel()
	cpu := local.PoolConfig{Pool: "dev-cpu", Region: "home", Country: "DE", Card: "cpu", VCPU: 4, MemoryGB: 8}
	p, err := local.New([]local.PoolConfig{pool(), cpu})
	if err != nil {
		t.Fatal(err)
	}
	offers, err := p.Offers(context.Background())
	if err != nil || len(offers) != 2 {
		t.Fatalf("Offers = %+v, %v", offers, err)
	}
	gpu := offers[0]
	if gpu.Provider != "local" || gpu.Country != "DE" || gpu.Tier != policy.TierSpot ||
		gpu.PricePerHour.String() != "0.40 EUR" || gpu.EgressPerGB.String() != "0.01 EUR" || gpu.Availability != policy.Available {
		t.Errorf("gpu offer = %+v", gpu)
	}
	if c := offers[1]; c.Tier != policy.TierOnDemand || c.PricePerHour.String() != "0.00 EUR" || c.EgressPerGB != nil {
		t.Errorf("cpu offer defaults = %+v", c)
	}
}

func TestNewRefusesBadPoolsNamingTheKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*local.PoolConfig)
		want   string
	}{
		{"pool not a subject token", func(c *local.PoolConfig) { c.Pool = "dev.gpu" }, `pools[1].pool: "dev.gpu" must match`},
		{"missing country", func(c *local.PoolConfig) { c.Country = "" }, `pools[1].country: want an ISO 3166-1 alpha-2 code`},
		{"country that is not a code", func(c *local.PoolConfig) { c.Country = "Germany" }, `pools[1].country: want an ISO 3166-1 alpha-2 code such as DE, got "Germany"`},
		{"missing region", func(c *local.PoolConfig) { c.Region = "" }, `pools[1].region: must be set`},
		{"missing card", func(c *local.PoolConfig) { c.Card = "" }, `pools[1].card: must be set`},
		{"bad tier", func(c *local.PoolConfig) { c.Tier = "cheap" }, `pools[1].tier: must be spot or on-demand`},
		{"bad price", func(c *local.PoolConfig) { c.PricePerHour = "1,20" }, `pools[1].price_per_hour, pools[1].currency:`},
		{"bad currency", func(c *local.PoolConfig) { c.Currency = "euro" }, `pools[1].price_per_hour, pools[1].currency:`},
		{"bad egress", func(c *local.PoolConfig) { c.EgressPerGB = "free" }, `pools[1].egress_per_gb:`},
		{"duplicate pool", func(c *local.PoolConfig) { c.Pool = "dev-gpu" }, `pools[1].pool: "dev-gpu" is already the name of pools[0]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			second := pool()
			second.Pool = "second"
			tt.change(&second)
			_, err := local.New([]local.PoolConfig{pool(), second})
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("New = %v, want prefix %q", err, tt.want)
			}
		})
	}
}
