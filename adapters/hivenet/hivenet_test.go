package hivenet_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/adaptertest"
	"github.com/gpuq/gpuq/adapters/hivenet"
	"github.com/gpuq/gpuq/policy"
)

var _ adapters.Provider = (*hivenet.Provider)(nil)

var fastRetry = adapters.RetryConfig{Attempts: 3, Backoff: time.Millisecond, MaxWait: 2 * time.Second, AttemptTimeout: 5 * time.Second}

func newProvider(t *testing.T, f *fakeHivenet) *hivenet.Provider {
	t.Helper()
	p, err := hivenet.New(hivenet.Config{BaseURL: f.srv.URL, APIKey: adapters.NewSecret(f.key), ImageID: "img-ubuntu-gpuq", Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func eur(s string) policy.Money {
	m, err := adapters.ParsePrice(s, "EUR")
	if err != nil {
		panic(err)
	}
	return m
}

func wantOffers() []policy.Offer {
	o := func(pool, region, country, card string, gpus, vcpu, mem int, price string) policy.Offer {
		return policy.Offer{Provider: "hivenet", Pool: pool, Region: region, Country: country, Card: card, GPUCount: gpus,
			VCPU: vcpu, MemoryGB: mem, Tier: policy.TierOnDemand, PricePerHour: eur(price), Availability: policy.Available}
	}
	return []policy.Offer{
		// An empty discount is no discount: the hourly price holds.
		o("hivenet-FR-paris-1-1x-RTX-4090", "FR", "FR", "RTX-4090", 1, 8, 48, "0.49"),
		o("hivenet-FR-paris-1-8x-RTX-4090", "FR", "FR", "RTX-4090", 8, 64, 384, "3.50"),
		o("hivenet-UAE-dubai-1-1x-RTX-5090", "UAE", "AE", "RTX-5090", 1, 16, 64, "0.79"),
		o("hivenet-US-dallas-1-1x-RTX-4090", "US", "US", "RTX-4090", 1, 8, 48, "0.55"),
	}
}

func TestProviderPassesTheConformanceSuite(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, func(t *testing.T) adaptertest.Target {
		f := newFakeHivenet(t)
		return adaptertest.Target{
			Provider: newProvider(t, f), Fake: f, WantOffers: wantOffers(),
			Pool: "hivenet-FR-paris-1-1x-RTX-4090", Region: "FR", Country: "FR", RetryAfter: time.Second,
			Errors: map[error][]adaptertest.Op{
				adapters.ErrCapacityUnavailable: {adaptertest.OpLaunch},
				adapters.ErrQuotaExceeded:       {adaptertest.OpLaunch},
				adapters.ErrAuth:                {adaptertest.OpOffers, adaptertest.OpLaunch, adaptertest.OpList},
				adapters.ErrInvalidRequest:      {adaptertest.OpLaunch},
				adapters.ErrRateLimited:         {adaptertest.OpOffers, adaptertest.OpDescribe},
				adapters.ErrProviderDown:        {adaptertest.OpOffers, adaptertest.OpLaunch, adaptertest.OpList, adaptertest.OpTerminate},
				adapters.ErrNotFound:            {adaptertest.OpDescribe},
			},
		}
	})
}

func TestPresetsAreReadAgainBeforeEveryCreate(t *testing.T) {
	t.Parallel()
	f := newFakeHivenet(t)
	p := newProvider(t, f)
	ctx := context.Background()
	if _, err := p.Offers(ctx); err != nil {
		t.Fatal(err)
	}
	// The preset is edited in place under a new id: a create with the id
	// read for the offers would answer 404.
	f.mu.Lock()
	f.presets[0]["id"] = "p-1-v2"
	f.mu.Unlock()
	target := adaptertest.Target{Pool: "hivenet-FR-paris-1-1x-RTX-4090", Region: "FR", Country: "FR"}
	for i := range 2 {
		if _, err := p.Launch(ctx, adaptertest.Request(target, fmt.Sprint("re", i))); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bodies[0]["preset_id"] != "p-1-v2" || len(f.creates) != 2 || f.creates[1] <= f.creates[0] {
		t.Errorf("creates after %v preset reads, bodies %v: want the presets read before each create", f.creates, f.bodies)
	}
	if ud, _ := f.bodies[0]["user_data"].(string); !strings.HasPrefix(ud, "#cloud-config") {
		t.Errorf("user_data = %q", ud)
	}
}

func TestRetiredPresetRentsNothingAndSaysWhy(t *testing.T) {
	t.Parallel()
	f := newFakeHivenet(t)
	p := newProvider(t, f)
	f.mu.Lock()
	f.presets = f.presets[1:]
	f.mu.Unlock()
	_, err := p.Launch(context.Background(), adaptertest.Request(adaptertest.Target{Pool: "hivenet-FR-paris-1-1x-RTX-4090", Region: "FR", Country: "FR"}, "gone"))
	if !errors.Is(err, adapters.ErrInvalidRequest) || !strings.Contains(err.Error(), "no preset of this region, location and SKU") || f.Rented() != 0 {
		t.Errorf("Launch on a retired preset = %v, %d rented", err, f.Rented())
	}
}

func TestNewRefusesBadConfigNamingTheKey(t *testing.T) {
	t.Parallel()
	key := adapters.NewSecret("k")
	for want, cfg := range map[string]hivenet.Config{
		"hivenet.api_key:":   {ImageID: "i"},
		"hivenet.image_id:":  {APIKey: key},
		"hivenet.base_url:":  {APIKey: key, ImageID: "i", BaseURL: "api.hivenet.com"},
		"hivenet.page_size:": {APIKey: key, ImageID: "i", PageSize: 500},
		"hivenet.currency:":  {APIKey: key, ImageID: "i", Currency: "credits"},
	} {
		if _, err := hivenet.New(cfg); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("New = %v, want prefix %q", err, want)
		}
	}
}
