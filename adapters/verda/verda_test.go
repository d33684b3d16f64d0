package verda_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/adaptertest"
	"github.com/gpuq/gpuq/adapters/verda"
	"github.com/gpuq/gpuq/policy"
)

var _ adapters.Provider = (*verda.Provider)(nil)

var fastRetry = adapters.RetryConfig{Attempts: 3, Backoff: time.Millisecond, MaxWait: 2 * time.Second, AttemptTimeout: 5 * time.Second}

func newProvider(t *testing.T, f *fakeVerda) *verda.Provider {
	t.Helper()
	p, err := verda.New(verda.Config{BaseURL: f.srv.URL, ClientID: f.id, ClientSecret: adapters.NewSecret(f.secret), Retry: fastRetry})
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

// wantOffers is what the fake's catalogue must read as.
func wantOffers() []policy.Offer {
	var out []policy.Offer
	for _, loc := range []struct{ code, country string }{{"FIN-01", "FI"}, {"ICE-01", "IS"}} {
		o := func(pool, card string, gpus, gpuMem, vcpu, mem int, tier policy.Tier, price string, avail policy.Availability) policy.Offer {
			return policy.Offer{Provider: "verda", Pool: "verda-" + loc.code + "-" + pool, Region: loc.code, Country: loc.country,
				Card: card, GPUCount: gpus, GPUMemoryGB: gpuMem, VCPU: vcpu, MemoryGB: mem, Tier: tier, PricePerHour: eur(price), Availability: avail}
		}
		out = append(out,
			o("1V100_6V", "V100", 1, 16, 6, 23, policy.TierOnDemand, "0.89", policy.Available),
			o("1V100_6V-spot", "V100", 1, 16, 6, 23, policy.TierSpot, "0.27", policy.Available),
			o("8H100_80S_176V", "H100", 8, 80, 176, 1480, policy.TierOnDemand, "19.92", policy.Available),
			o("8H100_80S_176V-spot", "H100", 8, 80, 176, 1480, policy.TierSpot, "6.0", policy.Unavailable),
			o("CPU_4V_16G", "cpu", 0, 0, 4, 16, policy.TierOnDemand, "0.0315", policy.Available),
		)
	}
	return out
}

func TestProviderPassesTheConformanceSuite(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, func(t *testing.T) adaptertest.Target {
		f := newFakeVerda(t)
		return adaptertest.Target{
			Provider: newProvider(t, f), Fake: f, WantOffers: wantOffers(),
			Pool: "verda-FIN-01-1V100_6V-spot", Region: "FIN-01", Country: "FI", RetryAfter: time.Second,
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

func TestLaunchSendsSpotContractLocationTagsAndAStartupScript(t *testing.T) {
	t.Parallel()
	f := newFakeVerda(t)
	p := newProvider(t, f)
	req := adaptertest.Request(adaptertest.Target{Pool: "verda-ICE-01-1V100_6V-spot", Region: "ICE-01", Country: "IS"}, "body")
	if _, err := p.Launch(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bodies[0]
	if b["is_spot"] != true || b["contract"] != "SPOT" || b["location_code"] != "ICE-01" || b["instance_type"] != "1V100.6V" || b["hostname"] != "tok-body" {
		t.Errorf("deploy body = %v", b)
	}
	script := f.scripts[fmt.Sprint(b["startup_script_id"])]
	if !strings.HasPrefix(script, "#!/bin/sh") || !strings.Contains(script, "gpuq worker --pool verda-ICE-01-1V100_6V-spot --region ICE-01 --country IS") {
		t.Errorf("startup script = %q", script)
	}
}

func TestTokenIsRefreshedAndRenewedWhenTheRefreshIsRefused(t *testing.T) {
	t.Parallel()
	f := newFakeVerda(t)
	// Tokens expire inside the adapter's renewal margin, so every call
	// renews.
	f.tokenTTL = 20 * time.Second
	p := newProvider(t, f)
	ctx := context.Background()
	for range 2 {
		if _, err := p.Instances(ctx, adapters.InstanceFilter{}); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	// The refresh token is revoked: the adapter falls back to its client
	// credentials.
	for k := range f.refresh {
		delete(f.refresh, k)
	}
	f.mu.Unlock()
	if _, err := p.Instances(ctx, adapters.InstanceFilter{}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got := strings.Join(f.grants, ","); got != "client_credentials,refresh_token,refresh_token,client_credentials" {
		t.Errorf("grants = %s", got)
	}
}

func TestWrongCredentialsAreAnAuthErrorThatNeverShowsTheSecret(t *testing.T) {
	t.Parallel()
	f := newFakeVerda(t)
	const wrong = "wrong-secret-value-1234"
	p, err := verda.New(verda.Config{BaseURL: f.srv.URL, ClientID: f.id, ClientSecret: adapters.NewSecret(wrong), Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Offers(context.Background())
	if !errors.Is(err, adapters.ErrAuth) {
		t.Fatalf("Offers = %v, want ErrAuth", err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Error("offers", "err", err, "provider", p)
	if strings.Contains(err.Error(), wrong) || strings.Contains(logged.String(), wrong) || strings.Contains(fmt.Sprintf("%+v", p), wrong) {
		t.Errorf("the secret shows: %v / %s", err, logged.String())
	}
}

func TestDiscontinuedSpotInstanceReadsAsPreempted(t *testing.T) {
	t.Parallel()
	f := newFakeVerda(t)
	p := newProvider(t, f)
	req := adaptertest.Request(adaptertest.Target{Pool: "verda-FIN-01-1V100_6V-spot", Region: "FIN-01", Country: "FI"}, "spot")
	inst, err := p.Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.instances[inst.ProviderID].Status = "discontinued"
	f.mu.Unlock()
	got, err := p.Describe(context.Background(), inst.ProviderID)
	if err != nil || got.State != adapters.StatePreempted || got.PricePerHour != eur("0.27") {
		t.Errorf("Describe = %+v, %v; want preempted at 0.27 EUR", got, err)
	}
}

func TestNewRefusesBadConfigNamingTheKey(t *testing.T) {
	t.Parallel()
	for want, cfg := range map[string]verda.Config{
		"verda.client_id:":     {ClientSecret: adapters.NewSecret("s")},
		"verda.client_secret:": {ClientID: "id"},
		"verda.base_url:":      {BaseURL: "ftp://x", ClientID: "id", ClientSecret: adapters.NewSecret("s")},
		"verda.currency:":      {ClientID: "id", ClientSecret: adapters.NewSecret("s"), Currency: "euro"},
	} {
		if _, err := verda.New(cfg); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("New = %v, want prefix %q", err, want)
		}
	}
}
