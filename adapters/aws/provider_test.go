package aws_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/adaptertest"
	"github.com/gpuq/gpuq/adapters/aws"
	"github.com/gpuq/gpuq/policy"
)

const testSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

var testPools = []aws.PoolConfig{
	{Pool: "aws-fra-h100-spot", Region: "eu-central-1", InstanceType: "p5.48xlarge", Tier: policy.TierSpot,
		EgressPerGB: "0.09", ImageID: "ami-0123456789abcdef0"},
	{Pool: "aws-fra-l4-spot", Region: "eu-central-1", InstanceType: "g6.xlarge", Tier: policy.TierSpot,
		OnDemandPrice: "0.8048", ImageID: "ami-0123456789abcdef0"},
	{Pool: "aws-fra-l4-od", Region: "eu-central-1", InstanceType: "g6.xlarge", Tier: policy.TierOnDemand,
		OnDemandPrice: "0.8048", ImageID: "ami-0123456789abcdef0"},
	{Pool: "aws-sto-cpu-od", Region: "eu-north-1", InstanceType: "c7i.large", Tier: policy.TierOnDemand,
		OnDemandPrice: "0.0912", ImageID: "ami-0123456789abcdef0"},
}

func usd(micros int64) policy.Money { return policy.Money{Micros: micros, Currency: "USD"} }

func newTarget(t *testing.T) (adaptertest.Target, *fakeEC2) {
	fake := newFakeEC2(t)
	p, err := aws.New(aws.Config{
		AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: adapters.NewSecret(testSecret),
		Endpoint: fake.URL, Pools: testPools,
		Retry: adapters.RetryConfig{Attempts: 3, Backoff: 5 * time.Millisecond, MaxWait: time.Second, AttemptTimeout: 5 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	egress := usd(90_000)
	all := []adaptertest.Op{adaptertest.OpOffers, adaptertest.OpLaunch, adaptertest.OpList, adaptertest.OpDescribe, adaptertest.OpTerminate}
	return adaptertest.Target{
		Provider: p, Fake: fake, Pool: "aws-fra-l4-spot", Region: "eu-central-1", Country: "DE",
		WantOffers: []policy.Offer{
			{Provider: "aws", Pool: "aws-fra-h100-spot", Region: "eu-central-1", Country: "DE", Card: "H100", GPUCount: 8, GPUMemoryGB: 80,
				VCPU: 192, MemoryGB: 2048, Tier: policy.TierSpot, PricePerHour: usd(39_875_000), EgressPerGB: &egress, Availability: policy.AvailabilityUnknown},
			{Provider: "aws", Pool: "aws-fra-l4-spot", Region: "eu-central-1", Country: "DE", Card: "L4", GPUCount: 1, GPUMemoryGB: 22,
				VCPU: 4, MemoryGB: 16, Tier: policy.TierSpot, PricePerHour: usd(298_700), Availability: policy.AvailabilityUnknown},
			{Provider: "aws", Pool: "aws-fra-l4-od", Region: "eu-central-1", Country: "DE", Card: "L4", GPUCount: 1, GPUMemoryGB: 22,
				VCPU: 4, MemoryGB: 16, Tier: policy.TierOnDemand, PricePerHour: usd(804_800), Availability: policy.AvailabilityUnknown},
			{Provider: "aws", Pool: "aws-sto-cpu-od", Region: "eu-north-1", Country: "SE", Card: "cpu",
				VCPU: 2, MemoryGB: 4, Tier: policy.TierOnDemand, PricePerHour: usd(91_200), Availability: policy.AvailabilityUnknown},
		},
		Errors: map[error][]adaptertest.Op{
			adapters.ErrCapacityUnavailable: {adaptertest.OpLaunch},
			adapters.ErrQuotaExceeded:       {adaptertest.OpLaunch},
			adapters.ErrAuth:                all,
			adapters.ErrInvalidRequest:      {adaptertest.OpLaunch},
			adapters.ErrRateLimited:         all,
			adapters.ErrProviderDown:        all,
			// A terminate of an instance EC2 no longer knows is done, so
			// only describe reports not found.
			adapters.ErrNotFound: {adaptertest.OpDescribe},
		},
	}, fake
}

func TestConformance(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, func(t *testing.T) adaptertest.Target { tg, _ := newTarget(t); return tg })
}

func TestSpotLaunchAsksForOneTimeSpotInTheCheapestZoneWithTheBootSpecAsUserData(t *testing.T) {
	t.Parallel()
	tg, fake := newTarget(t)
	req := adaptertest.Request(tg, "spot")
	inst, err := tg.Provider.Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	_, id, _ := strings.Cut(inst.ProviderID, "/")
	got := fake.instance(id)
	if got.lifecycle != "spot" || got.zone != "eu-central-1c" || got.token != req.ClientToken {
		t.Fatalf("want a spot instance in the cheapest zone eu-central-1c with the client token, got %+v", got)
	}
	for _, want := range []string{"#cloud-config", "worker --pool aws-fra-l4-spot", "--notice aws", "GPUQ_NATS_CREDENTIAL="} {
		if !strings.Contains(got.userData, want) {
			t.Fatalf("user data must contain %q:\n%s", want, got.userData)
		}
	}
	if strings.Contains(strings.ToLower(got.userData), "database") {
		t.Fatalf("a worker's boot spec never carries a database URL:\n%s", got.userData)
	}
	if got.tags[adapters.TagPool] != "aws-fra-l4-spot" || got.tags[adapters.TagManagedBy] != "gpuq" {
		t.Fatalf("the instance must carry gpuq's tags, got %v", got.tags)
	}
	if inst.PricePerHour != usd(298_700) {
		t.Fatalf("a spot instance is charged its zone's spot price 0.2987 USD/h, got %s", inst.PricePerHour)
	}
}

func TestReclaimedSpotInstanceIsPreempted(t *testing.T) {
	t.Parallel()
	tg, fake := newTarget(t)
	inst, err := tg.Provider.Launch(context.Background(), adaptertest.Request(tg, "reclaimed"))
	if err != nil {
		t.Fatal(err)
	}
	_, id, _ := strings.Cut(inst.ProviderID, "/")
	fake.reclaim(id)
	got, err := tg.Provider.Describe(context.Background(), inst.ProviderID)
	if err != nil || got.State != adapters.StatePreempted {
		t.Fatalf("an instance EC2 terminated with Server.SpotInstanceTermination is preempted, got %+v (%v)", got, err)
	}
}

func TestCredentialsComeFromTheEnvironmentAndAreNeverPrinted(t *testing.T) {
	fake := newFakeEC2(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", testSecret)
	t.Setenv("AWS_SESSION_TOKEN", "")
	cfg := aws.Config{Endpoint: fake.URL, Pools: testPools[:1]}
	p, err := aws.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Offers(context.Background()); err != nil {
		t.Fatalf("credentials from the environment must sign requests: %v", err)
	}
	fake.Fail(adaptertest.OpOffers, adapters.ErrAuth, 10)
	_, err = p.Offers(context.Background())
	if !errors.Is(err, adapters.ErrAuth) {
		t.Fatalf("want an auth error, got %v", err)
	}
	for _, s := range []string{err.Error(), fmt.Sprintf("%+v", cfg.WithDefaults()), fmt.Sprintf("%#v", cfg.WithDefaults())} {
		if strings.Contains(s, testSecret) {
			t.Fatalf("the secret key leaked into %q", s)
		}
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	base := aws.Config{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: adapters.NewSecret(testSecret)}
	for _, c := range []struct {
		pool aws.PoolConfig
		want string
	}{
		{aws.PoolConfig{Pool: "p", Region: "eu-central-1", InstanceType: "g6.xlarge", Tier: policy.TierOnDemand, ImageID: "ami-1"}, "aws.pools[0].on_demand_price"},
		{aws.PoolConfig{Pool: "p", Region: "eu-central-1", InstanceType: "g6.xlarge", Tier: "reserved", ImageID: "ami-1"}, "aws.pools[0].tier"},
		{aws.PoolConfig{Pool: "p", Region: "eu-central-1", InstanceType: "g6.xlarge", Tier: policy.TierSpot}, "aws.pools[0].image_id"},
		{aws.PoolConfig{Pool: "p", Region: "eu-central-1", Zone: "eu-west-1a", InstanceType: "g6.xlarge", Tier: policy.TierSpot, ImageID: "ami-1"}, "aws.pools[0].zone"},
	} {
		cfg := base
		cfg.Pools = []aws.PoolConfig{c.pool}
		if _, err := aws.New(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error naming %s, got %v", c.want, err)
		}
	}
}

func TestALocalZoneInAnotherCountryChangesNoOffer(t *testing.T) {
	t.Parallel()
	tg, fake := newTarget(t)
	before, err := tg.Provider.Offers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Warsaw's Local Zone hangs off Frankfurt's region, is in Poland, and
	// is the cheapest: taking it would both misstate the country and the
	// price of the DE pools.
	fake.AddUnknownLocation()
	after, err := tg.Provider.Offers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("a Local Zone changed the offers:\nbefore %+v\nafter  %+v", before, after)
	}
}
