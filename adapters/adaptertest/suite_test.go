package adaptertest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/adaptertest"
	"github.com/gpuq/gpuq/policy"
)

// memCloud is an in-memory provider and its fake at once, with one defect
// switched on by name, so the suite can be shown to catch each defect.
type memCloud struct {
	defect string

	mu        sync.Mutex
	instances []adapters.Instance
	faults    map[adaptertest.Op][]error
	drop      bool
	calls     map[adaptertest.Op][]time.Time
	pageSize  int
	extraLoc  bool
}

var retry = adapters.RetryConfig{Attempts: 3, Backoff: time.Millisecond, MaxWait: 2 * time.Second, AttemptTimeout: time.Second}

const pool = "mem-eu"

func offer(p string, country string) policy.Offer {
	return policy.Offer{Provider: "mem", Pool: p, Region: "eu-1", Country: country, Card: "L4", GPUCount: 1, GPUMemoryGB: 24,
		VCPU: 8, MemoryGB: 32, Tier: policy.TierSpot, PricePerHour: policy.Money{Micros: 400_000, Currency: "EUR"}, Availability: policy.Available}
}

func (m *memCloud) Name() string { return "mem" }

func (m *memCloud) enter(op adaptertest.Op) error {
	m.calls[op] = append(m.calls[op], time.Now())
	if fs := m.faults[op]; len(fs) > 0 {
		m.faults[op] = fs[1:]
		ra := time.Duration(0)
		if fs[0] == adapters.ErrRateLimited {
			ra = 300 * time.Millisecond
		}
		return &adapters.ProviderError{Provider: "mem", Op: string(op), Pool: pool, Kind: fs[0], RetryAfter: ra}
	}
	return nil
}

func (m *memCloud) Offers(ctx context.Context) ([]policy.Offer, error) {
	var out []policy.Offer
	err := adapters.Retry(ctx, retry, func(context.Context) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if err := m.enter(adaptertest.OpOffers); err != nil {
			return err
		}
		out = []policy.Offer{offer(pool, "DE")}
		if m.extraLoc && m.defect == "guess-country" {
			out = append(out, offer("mem-new", "DE"))
		}
		return nil
	})
	return out, err
}

func (m *memCloud) create(req adapters.LaunchRequest) (adapters.Instance, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.enter(adaptertest.OpLaunch); err != nil {
		return adapters.Instance{}, err
	}
	inst := adapters.Instance{Provider: "mem", ProviderID: fmt.Sprintf("m-%d", len(m.instances)+1), Pool: req.Pool, State: adapters.StatePending,
		LaunchedAt: time.Now(), PricePerHour: offer(pool, "DE").PricePerHour, ClientToken: req.ClientToken, Tags: req.Tags()}
	m.instances = append(m.instances, inst)
	if m.drop {
		m.drop = false
		return adapters.Instance{}, &adapters.ProviderError{Provider: "mem", Op: "launch", Kind: adapters.ErrProviderDown}
	}
	return inst, nil
}

func (m *memCloud) Launch(ctx context.Context, req adapters.LaunchRequest) (adapters.Instance, error) {
	if req.Pool != pool {
		return adapters.Instance{}, &adapters.ProviderError{Provider: "mem", Op: "launch", Pool: req.Pool, Kind: adapters.ErrInvalidRequest}
	}
	find := func(ctx context.Context, token string) (adapters.Instance, bool, error) {
		got, err := m.Instances(ctx, adapters.InstanceFilter{ClientToken: token})
		if err != nil || len(got) == 0 {
			return adapters.Instance{}, false, err
		}
		return got[0], true, nil
	}
	if m.defect != "double-launch" {
		if inst, ok, err := find(ctx, req.ClientToken); err != nil || ok {
			return inst, err
		}
	} else {
		find = func(context.Context, string) (adapters.Instance, bool, error) { return adapters.Instance{}, false, nil }
	}
	return adapters.LaunchIdempotent(ctx, retry, req, func(context.Context) (adapters.Instance, error) { return m.create(req) }, find)
}

func (m *memCloud) Describe(ctx context.Context, id string) (adapters.Instance, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.enter(adaptertest.OpDescribe); err != nil {
		return adapters.Instance{}, err
	}
	for _, i := range m.instances {
		if i.ProviderID == id {
			return i, nil
		}
	}
	return adapters.Instance{}, &adapters.ProviderError{Provider: "mem", Op: "describe", Kind: adapters.ErrNotFound}
}

func (m *memCloud) Instances(ctx context.Context, f adapters.InstanceFilter) ([]adapters.Instance, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.enter(adaptertest.OpList); err != nil {
		return nil, err
	}
	var out []adapters.Instance
	limit := len(m.instances)
	if m.defect == "first-page-only" && m.pageSize > 0 {
		limit = min(limit, m.pageSize)
	}
	for _, i := range m.instances[:limit] {
		if f.Match(i) {
			out = append(out, i)
		}
	}
	return out, nil
}

func (m *memCloud) Terminate(ctx context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.enter(adaptertest.OpTerminate); err != nil {
		return err
	}
	for k := range m.instances {
		if m.instances[k].ProviderID == id {
			m.instances[k].State = adapters.StateTerminated
		}
	}
	return nil
}

func (m *memCloud) Fail(op adaptertest.Op, kind error, n int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for range n {
		m.faults[op] = append(m.faults[op], kind)
	}
	return true
}
func (m *memCloud) DropLaunchResponse() bool { m.mu.Lock(); m.drop = true; m.mu.Unlock(); return true }
func (m *memCloud) Boot() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.instances {
		if m.instances[k].State == adapters.StatePending {
			m.instances[k].State = adapters.StateRunning
		}
	}
}
func (m *memCloud) Rented() int { m.mu.Lock(); defer m.mu.Unlock(); return len(m.instances) }
func (m *memCloud) Calls(op adaptertest.Op) []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]time.Time(nil), m.calls[op]...)
}
func (m *memCloud) SetPageSize(n int) bool { m.mu.Lock(); m.pageSize = n; m.mu.Unlock(); return true }
func (m *memCloud) AddUnknownLocation() bool {
	m.mu.Lock()
	m.extraLoc = true
	m.mu.Unlock()
	return true
}

func target(defect string) func(t *testing.T) adaptertest.Target {
	return func(t *testing.T) adaptertest.Target {
		m := &memCloud{defect: defect, faults: map[adaptertest.Op][]error{}, calls: map[adaptertest.Op][]time.Time{}}
		return adaptertest.Target{Provider: m, Fake: m, WantOffers: []policy.Offer{offer(pool, "DE")}, Pool: pool, Region: "eu-1",
			Country: "DE", RetryAfter: 300 * time.Millisecond,
			Errors: map[error][]adaptertest.Op{adapters.ErrCapacityUnavailable: {adaptertest.OpLaunch}, adapters.ErrRateLimited: {adaptertest.OpDescribe}}}
	}
}

// TestHelperRunsTheSuite runs the suite against memCloud with the defect
// named by ADAPTERTEST_DEFECT; the tests below run it in a child process,
// since a suite that fails must fail its own test.
func TestHelperRunsTheSuite(t *testing.T) {
	defect, ok := os.LookupEnv("ADAPTERTEST_DEFECT")
	if !ok {
		t.Skip("run by TestSuiteCatches… in a child process")
	}
	adaptertest.Run(t, target(defect))
}

func runSuite(t *testing.T, defect string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHelperRunsTheSuite$", "-test.v")
	cmd.Env = append(os.Environ(), "ADAPTERTEST_DEFECT="+defect)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestSuitePassesACorrectAdapter(t *testing.T) {
	t.Parallel()
	if out, err := runSuite(t, ""); err != nil {
		t.Fatalf("the suite fails a correct adapter: %v\n%s", err, out)
	}
}

func TestSuiteCatchesEachDefect(t *testing.T) {
	t.Parallel()
	for defect, want := range map[string]string{
		"double-launch":   "rented 2 machines for one launch whose response was dropped",
		"first-page-only": "Instances over pages of 1",
		"guess-country":   "its country was guessed",
	} {
		t.Run(defect, func(t *testing.T) {
			t.Parallel()
			out, err := runSuite(t, defect)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || !strings.Contains(out, want) {
				t.Errorf("the suite let %s pass (err %v), or failed for another reason:\n%s", defect, err, out)
			}
		})
	}
}
