package sim_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/adaptertest"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/adapters/sim"
	"github.com/gpuq/gpuq/policy"
)

var _ adapters.Provider = (*sim.Provider)(nil)

// sleeper is a stand-in worker: a process that waits to be stopped. The
// end-to-end test in cmd/gpuq runs real workers on the simulated cloud.
func sleeper(t *testing.T) *local.Launcher {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "worker")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nexec sleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { devnull.Close() })
	return &local.Launcher{Executable: exe, Output: devnull}
}

// writeTrace writes a trace in the published layout.
func writeTrace(t *testing.T, dir, name, data string, gapSeconds int) {
	t.Helper()
	body := `{"metadata": {"gap_seconds": ` + strconv.Itoa(gapSeconds) + `}, "data": [` + data + `]}`
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

var fastRetry = adapters.RetryConfig{Attempts: 3, Backoff: time.Millisecond, MaxWait: 2 * time.Second, AttemptTimeout: 5 * time.Second}

func startCloud(t *testing.T, cfg sim.Config, onEvent func(sim.Event)) *sim.Cloud {
	t.Helper()
	c, err := sim.New(cfg, sleeper(t), nil, onEvent)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }() //nolint:errcheck // ends with ctx
	t.Cleanup(func() { cancel(); <-done })
	return c
}

// simFake steers the cloud for the conformance suite.
type simFake struct {
	c          *sim.Cloud
	retryAfter time.Duration
}

func (f simFake) Fail(op adaptertest.Op, kind error, n int) bool {
	f.c.Fail(sim.Op(op), kind, n, f.retryAfter)
	return true
}
func (f simFake) DropLaunchResponse() bool { f.c.DropNextLaunchResponse(); return true }
func (f simFake) Boot()                    { f.c.BootAll(context.Background()) }
func (f simFake) Rented() int              { return f.c.Created() }
func (f simFake) Calls(op adaptertest.Op) []time.Time {
	return f.c.Calls(sim.Op(op))
}
func (f simFake) SetPageSize(n int) bool   { f.c.SetPageSize(n); return true }
func (f simFake) AddUnknownLocation() bool { return false }

func TestCloudPassesTheConformanceSuite(t *testing.T) {
	t.Parallel()
	conformance(t, func(t *testing.T, c *sim.Cloud) *sim.Provider { return c.Provider(fastRetry) })
}

// TestCloudServedOverHTTPPassesTheConformanceSuite runs the suite against
// the adapter of a cloud reached through its HTTP API, as a control plane
// reaches `gpuq sim-cloud`.
func TestCloudServedOverHTTPPassesTheConformanceSuite(t *testing.T) {
	t.Parallel()
	conformance(t, func(t *testing.T, c *sim.Cloud) *sim.Provider {
		srv := httptest.NewServer(c.Handler(sim.HandlerOptions{}))
		t.Cleanup(srv.Close)
		p, err := sim.Dial(srv.URL, fastRetry)
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}

func conformance(t *testing.T, adapter func(*testing.T, *sim.Cloud) *sim.Provider) {
	dir := t.TempDir()
	writeTrace(t, dir, "zone_v100_1.json", "1, 1, 1, 1", 600)
	cfg := sim.Config{TracesDir: dir, Pools: []sim.PoolConfig{
		{Pool: "v100-spot", Region: "us-east-1c", Country: "US", Card: "V100", GPUCount: 1, GPUMemoryGB: 16, VCPU: 8, MemoryGB: 61,
			Tier: "spot", PricePerHour: "0.918", Trace: "zone_v100_1.json", BootDelay: time.Hour},
		{Pool: "v100", Region: "us-east-1c", Country: "US", Card: "V100", GPUCount: 1, GPUMemoryGB: 16, VCPU: 8, MemoryGB: 61,
			PricePerHour: "3.06", Currency: "USD", Grace: time.Second},
	}}
	zero := 0.0
	adaptertest.Run(t, func(t *testing.T) adaptertest.Target {
		c := startCloud(t, cfg, nil)
		retryAfter := 300 * time.Millisecond
		return adaptertest.Target{
			Provider: adapter(t, c), Fake: simFake{c: c, retryAfter: retryAfter}, Pool: "v100", Region: "us-east-1c", Country: "US",
			RetryAfter: retryAfter,
			WantOffers: []policy.Offer{
				{Provider: "sim", Pool: "v100-spot", Region: "us-east-1c", Country: "US", Card: "V100", GPUCount: 1, GPUMemoryGB: 16, VCPU: 8, MemoryGB: 61,
					Tier: policy.TierSpot, PricePerHour: policy.Money{Micros: 918_000, Currency: "USD"}, Availability: policy.Available, PreemptionRate: &zero},
				{Provider: "sim", Pool: "v100", Region: "us-east-1c", Country: "US", Card: "V100", GPUCount: 1, GPUMemoryGB: 16, VCPU: 8, MemoryGB: 61,
					Tier: policy.TierOnDemand, PricePerHour: policy.Money{Micros: 3_060_000, Currency: "USD"}, Availability: policy.Available},
			},
			Errors: map[error][]adaptertest.Op{
				adapters.ErrCapacityUnavailable: {adaptertest.OpLaunch},
				adapters.ErrQuotaExceeded:       {adaptertest.OpLaunch},
				adapters.ErrAuth:                {adaptertest.OpOffers, adaptertest.OpLaunch, adaptertest.OpList},
				adapters.ErrInvalidRequest:      {adaptertest.OpLaunch},
				adapters.ErrRateLimited:         {adaptertest.OpOffers, adaptertest.OpLaunch, adaptertest.OpDescribe},
				adapters.ErrProviderDown:        {adaptertest.OpOffers, adaptertest.OpLaunch, adaptertest.OpList, adaptertest.OpTerminate},
				adapters.ErrNotFound:            {adaptertest.OpDescribe},
			},
		}
	})
}

func TestSpotPoolIsPreemptedWhenItsTraceFalls(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Ticks of 60 virtual seconds at 600x: 100 ms each. Capacity 1, 1, 0…
	writeTrace(t, dir, "z_v100_1.json", "1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0", 60)
	var mu sync.Mutex
	var events []sim.Event
	c := startCloud(t, sim.Config{TracesDir: dir, Speed: 600, Step: 10 * time.Millisecond, Pools: []sim.PoolConfig{
		{Pool: "spot", Region: "r", Country: "US", Card: "V100", Tier: "spot", PricePerHour: "1", Trace: "z_v100_1.json", Grace: 200 * time.Millisecond},
	}}, func(e sim.Event) { mu.Lock(); events = append(events, e); mu.Unlock() })
	p := c.Provider(fastRetry)
	req := adapters.LaunchRequest{Pool: "spot", ClientToken: "t1", Boot: adapters.BootSpec{InstanceID: "i1", Pool: "spot", Region: "r", Country: "US", NATSURL: "nats://127.0.0.1:4222"}}
	inst, err := p.Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	// A second instance does not fit: the trace holds one.
	req2 := req
	req2.ClientToken = "t2"
	if _, err := p.Launch(context.Background(), req2); !errors.Is(err, adapters.ErrCapacityUnavailable) {
		t.Errorf("second launch = %v, want no capacity", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		got, err := p.Describe(context.Background(), inst.ProviderID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == adapters.StatePreempted {
			mu.Lock()
			defer mu.Unlock()
			if len(events) != 1 || events[0].Tick != 2 || events[0].Instance != inst.ProviderID {
				t.Errorf("events = %+v, want one preemption at tick 2", events)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("instance not preempted at the trace's first 0")
}

func TestInstanceEndsAtItsPoolsMaximumDuration(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var events []sim.Event
	c := startCloud(t, sim.Config{Speed: 3600, Step: 10 * time.Millisecond, Pools: []sim.PoolConfig{
		{Pool: "capped", Region: "r", Country: "US", Card: "cpu", PricePerHour: "1", BootDelay: time.Second, MaxDuration: 30 * time.Minute, Grace: 200 * time.Millisecond},
	}}, func(e sim.Event) { mu.Lock(); events = append(events, e); mu.Unlock() })
	p := c.Provider(fastRetry)
	offers, err := p.Offers(context.Background())
	if err != nil || len(offers) != 1 || offers[0].MaxDuration != 30*time.Minute {
		t.Fatalf("offers = %+v, %v; want the cap stated", offers, err)
	}
	req := adapters.LaunchRequest{Pool: "capped", ClientToken: "t1", Boot: adapters.BootSpec{InstanceID: "i1", Pool: "capped", Region: "r", Country: "US", NATSURL: "nats://127.0.0.1:4222"}}
	inst, err := p.Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	// 30 virtual minutes at 3600x: half a second.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		got, err := p.Describe(context.Background(), inst.ProviderID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == adapters.StateTerminated {
			if !strings.Contains(got.Reason, "maximum duration 30m0s reached") {
				t.Errorf("reason = %q", got.Reason)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("instance still up past its maximum duration")
}

func TestDialRefusesAURLThatIsNotAPlainHTTPAddress(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:80", "ftp://host", "http://user:pw@host:1", "http://"} {
		if _, err := sim.Dial(u, fastRetry); err == nil || !strings.Contains(err.Error(), "sim.url") {
			t.Errorf("Dial(%q) = %v, want an error naming sim.url", u, err)
		}
	}
}

// A launch whose answer never comes (the caller died waiting) left its
// machine rented; the same client token finds it and rents no second one.
func TestHeldLaunchAnswerLeavesTheMachineAndItsTokenFindsIt(t *testing.T) {
	t.Parallel()
	c := startCloud(t, sim.Config{Pools: []sim.PoolConfig{{Pool: "v100", Region: "us-east-1c", Country: "US", Card: "V100",
		GPUCount: 1, GPUMemoryGB: 16, VCPU: 8, MemoryGB: 61, PricePerHour: "3.06", BootDelay: time.Hour}}}, nil)
	srv := httptest.NewServer(c.Handler(sim.HandlerOptions{HoldLaunches: 1}))
	t.Cleanup(srv.Close)
	p, err := sim.Dial(srv.URL, adapters.RetryConfig{Attempts: 1, Backoff: time.Millisecond, AttemptTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	req := adapters.LaunchRequest{Pool: "v100", ClientToken: "tok-1", Boot: adapters.BootSpec{InstanceID: "gq-1", Pool: "v100",
		Region: "us-east-1c", Country: "US", NATSURL: "nats://127.0.0.1:4222"}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err = p.Launch(ctx, req)
	cancel()
	if err == nil {
		t.Fatal("a held launch answered")
	}
	if got := c.Created(); got != 1 {
		t.Fatalf("the held launch created %d instances, want 1", got)
	}
	inst, err := p.Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if inst.ClientToken != "tok-1" || inst.Tags[adapters.TagInstance] != "gq-1" || c.Created() != 1 {
		t.Fatalf("relaunch with the same token: %+v, %d created; want the held launch's machine and no other", inst, c.Created())
	}
	// The hold was for the first launch only.
	req.ClientToken, req.Boot.InstanceID = "tok-2", "gq-2"
	if _, err := p.Launch(context.Background(), req); err != nil || c.Created() != 2 {
		t.Fatalf("a second launch: %v, %d created", err, c.Created())
	}
}
