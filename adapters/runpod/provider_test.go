package runpod_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/adaptertest"
	"github.com/gpuq/gpuq/adapters/runpod"
	"github.com/gpuq/gpuq/policy"
)

const testKey = "rpa_TESTKEY0123456789"

var testPools = []runpod.PoolConfig{
	{Pool: "rp-ro-h100-spot", GPUTypeID: "NVIDIA H100 80GB HBM3", Card: "H100", DataCenterID: "EU-RO-1", Tier: policy.TierSpot,
		Image: "ghcr.io/gpuq/worker:test"},
	{Pool: "rp-se-h100x2-od", GPUTypeID: "NVIDIA H100 80GB HBM3", GPUCount: 2, DataCenterID: "EU-SE-1", Tier: policy.TierOnDemand},
	{Pool: "rp-is-a40-spot", GPUTypeID: "NVIDIA A40", Card: "A40", DataCenterID: "EUR-IS-1", CloudType: "COMMUNITY",
		Tier: policy.TierSpot, BidPerGPU: "0.20"},
}

func usd(micros int64) policy.Money { return policy.Money{Micros: micros, Currency: "USD"} }

func newTarget(t *testing.T) (adaptertest.Target, *fakeRunPod) {
	fake := newFakeRunPod(t)
	p, err := runpod.New(runpod.Config{APIKey: adapters.NewSecret(testKey), Endpoint: fake.URL, Pools: testPools,
		Retry: adapters.RetryConfig{Attempts: 3, Backoff: 5 * time.Millisecond, MaxWait: 2 * time.Second, AttemptTimeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	zero := usd(0)
	all := []adaptertest.Op{adaptertest.OpOffers, adaptertest.OpLaunch, adaptertest.OpList, adaptertest.OpDescribe, adaptertest.OpTerminate}
	return adaptertest.Target{
		Provider: p, Fake: fake, Pool: "rp-ro-h100-spot", Region: "EU-RO-1", Country: "RO", RetryAfter: time.Second,
		WantOffers: []policy.Offer{
			{Provider: "runpod", Pool: "rp-ro-h100-spot", Region: "EU-RO-1", Country: "RO", Card: "H100", GPUCount: 1, GPUMemoryGB: 80,
				VCPU: 16, MemoryGB: 125, Tier: policy.TierSpot, PricePerHour: usd(1_890_000), EgressPerGB: &zero, Availability: policy.Available},
			{Provider: "runpod", Pool: "rp-se-h100x2-od", Region: "EU-SE-1", Country: "SE", Card: "H100 80GB HBM3", GPUCount: 2, GPUMemoryGB: 80,
				VCPU: 64, MemoryGB: 502, Tier: policy.TierOnDemand, PricePerHour: usd(5_980_000), EgressPerGB: &zero, Availability: policy.Scarce},
			// Bidding 0.20 under a minimum of 0.25: outbid before it starts.
			{Provider: "runpod", Pool: "rp-is-a40-spot", Region: "EUR-IS-1", Country: "IS", Card: "A40", GPUCount: 1, GPUMemoryGB: 48,
				VCPU: 9, MemoryGB: 50, Tier: policy.TierSpot, PricePerHour: usd(200_000), EgressPerGB: &zero, Availability: policy.Unavailable},
		},
		Errors: map[error][]adaptertest.Op{
			adapters.ErrCapacityUnavailable: {adaptertest.OpLaunch},
			adapters.ErrAuth:                all,
			adapters.ErrInvalidRequest:      {adaptertest.OpLaunch},
			adapters.ErrRateLimited:         all,
			adapters.ErrProviderDown:        all,
			adapters.ErrNotFound:            {adaptertest.OpDescribe},
		},
	}, fake
}

func TestConformance(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, func(t *testing.T) adaptertest.Target { tg, _ := newTarget(t); return tg })
}

func TestInterruptiblePodBidsTheMinimumAndRunsTheWorkerWithRunPodsGrace(t *testing.T) {
	t.Parallel()
	tg, fake := newTarget(t)
	inst, err := tg.Provider.Launch(context.Background(), adaptertest.Request(tg, "spot"))
	if err != nil {
		t.Fatal(err)
	}
	got := fake.pod(inst.ProviderID)
	if got.bid.String() != "1.89" || got.dc != "EU-RO-1" || got.image != "ghcr.io/gpuq/worker:test" {
		t.Fatalf("want a pod in EU-RO-1 bidding the minimum 1.89 with the boot image, got %+v", got)
	}
	for _, want := range []string{"worker --pool rp-ro-h100-spot", "--notice sigterm", "--provider runpod"} {
		if !strings.Contains(got.args, want) {
			t.Fatalf("the pod's command must contain %q, got %q", want, got.args)
		}
	}
	if got.env[adapters.EnvNATSCredential] != "conformance-credential" {
		t.Fatalf("the NATS credential travels in the pod's environment, got %v", got.env)
	}
	if inst.PricePerHour != usd(1_890_000) {
		t.Fatalf("an interruptible pod costs its bid, got %s", inst.PricePerHour)
	}
}

func TestAPodTooLowABidLeavesIsNoCapacity(t *testing.T) {
	t.Parallel()
	tg, fake := newTarget(t)
	req := adaptertest.Request(tg, "lowbid")
	req.Pool, req.Boot.Pool = "rp-is-a40-spot", "rp-is-a40-spot"
	_, err := tg.Provider.Launch(context.Background(), req)
	var pe *adapters.ProviderError
	if !errors.Is(err, adapters.ErrCapacityUnavailable) || !errors.As(err, &pe) || pe.Pool != "rp-is-a40-spot" {
		t.Fatalf("a bid under the minimum must be no capacity in the pool, got %v", err)
	}
	if fake.Rented() != 0 {
		t.Fatal("no pod may be rented")
	}
}

func TestOutbidPodIsPreempted(t *testing.T) {
	t.Parallel()
	tg, fake := newTarget(t)
	inst, err := tg.Provider.Launch(context.Background(), adaptertest.Request(tg, "outbid"))
	if err != nil {
		t.Fatal(err)
	}
	fake.outbid(inst.ProviderID)
	got, err := tg.Provider.Describe(context.Background(), inst.ProviderID)
	if err != nil || got.State != adapters.StatePreempted {
		t.Fatalf("an interruptible pod RunPod stopped is preempted, got %+v (%v)", got, err)
	}
}

func TestAPIKeyComesFromTheEnvironmentTravelsInAHeaderAndIsNeverPrinted(t *testing.T) {
	fake := newFakeRunPod(t)
	t.Setenv("RUNPOD_API_KEY", testKey)
	cfg := runpod.Config{Endpoint: fake.URL, Pools: testPools[:1]}
	p, err := runpod.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Offers(context.Background()); err != nil {
		t.Fatalf("the key from RUNPOD_API_KEY must authenticate: %v", err)
	}
	fake.Fail(adaptertest.OpOffers, adapters.ErrAuth, 10)
	_, err = p.Offers(context.Background())
	if !errors.Is(err, adapters.ErrAuth) {
		t.Fatalf("want an auth error, got %v", err)
	}
	for _, s := range []string{err.Error(), fmt.Sprintf("%+v", cfg.WithDefaults()), fmt.Sprintf("%#v", cfg.WithDefaults())} {
		if strings.Contains(s, testKey) {
			t.Fatalf("the API key leaked into %q", s)
		}
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pool runpod.PoolConfig
		want string
	}{
		{runpod.PoolConfig{Pool: "p", GPUTypeID: "NVIDIA A40", DataCenterID: "XX-MARS-1", Tier: policy.TierSpot}, "runpod.pools[0].data_center_id"},
		{runpod.PoolConfig{Pool: "p", GPUTypeID: "NVIDIA A40", DataCenterID: "EU-RO-1", Tier: policy.TierOnDemand, BidPerGPU: "0.3"}, "runpod.pools[0].bid_per_gpu"},
		{runpod.PoolConfig{Pool: "p", GPUTypeID: "NVIDIA A40", DataCenterID: "EU-RO-1", Tier: policy.TierSpot, CloudType: "PRIVATE"}, "runpod.pools[0].cloud_type"},
	} {
		_, err := runpod.New(runpod.Config{APIKey: adapters.NewSecret(testKey), Pools: []runpod.PoolConfig{c.pool}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error naming %s, got %v", c.want, err)
		}
	}
}
