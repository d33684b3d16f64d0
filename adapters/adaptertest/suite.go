package adaptertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
)

// Op names a provider call a fake can be told to fail.
type Op string

const (
	OpOffers    Op = "offers"
	OpLaunch    Op = "launch"
	OpDescribe  Op = "describe"
	OpList      Op = "list"
	OpTerminate Op = "terminate"
)

// Fake is the test side of a provider: what the suite needs to steer it.
// Methods answer false when the provider documents no such behaviour; the
// suite then skips that check and says so.
type Fake interface {
	// Fail makes the next n calls of op fail the way the provider
	// documents kind (status code, error body, headers). A rate-limited
	// answer asks for Target.RetryAfter.
	Fail(op Op, kind error, n int) bool
	// DropLaunchResponse makes the next launch rent its machine and then
	// lose the answer (a 5xx after the fact, or a dropped connection).
	DropLaunchResponse() bool
	// Boot brings every pending instance up.
	Boot()
	// Rented is how many machines the fake has created so far.
	Rented() int
	// Calls are the times of op's calls that reached the fake.
	Calls(op Op) []time.Time
	// SetPageSize makes every paginated listing return at most n items a
	// page; false when the provider does not paginate.
	SetPageSize(n int) bool
	// AddUnknownLocation adds capacity in a location whose country the
	// adapter cannot know; false when the provider has no such thing.
	AddUnknownLocation() bool
}

// Target is one adapter wired to a fresh fake.
type Target struct {
	Provider adapters.Provider
	Fake     Fake
	// WantOffers are the offers the adapter must read from the fake's
	// catalogue, in any order: the suite compares every field.
	WantOffers []policy.Offer
	// Pool is a pool of WantOffers to launch into.
	Pool string
	// Region and Country of Pool, for the boot spec.
	Region, Country string
	// RetryAfter is what the fake's rate-limited answers ask for.
	RetryAfter time.Duration
	// Errors lists, per kind, the ops for which the provider documents an
	// error of that kind; the suite injects each through Fake.Fail.
	Errors map[error][]Op
}

// AllErrorKinds are the kinds the contract defines.
var AllErrorKinds = []error{
	adapters.ErrCapacityUnavailable, adapters.ErrQuotaExceeded, adapters.ErrAuth, adapters.ErrInvalidRequest,
	adapters.ErrRateLimited, adapters.ErrProviderDown, adapters.ErrNotFound,
}

// Boot is the boot spec the suite launches with.
func Boot(t Target, instanceID string) adapters.BootSpec {
	return adapters.BootSpec{
		InstanceID: instanceID, Pool: t.Pool, Region: t.Region, Country: t.Country,
		NATSURL: "nats://127.0.0.1:4222", Credential: adapters.NewSecret("conformance-credential"),
		Image: "ghcr.io/gpuq/worker:test",
	}
}

// Request is a launch request of the suite, token and instance id derived
// from name.
func Request(t Target, name string) adapters.LaunchRequest {
	return adapters.LaunchRequest{Pool: t.Pool, ClientToken: "tok-" + name, Boot: Boot(t, "inst-"+name)}
}

// Run runs the conformance suite; newTarget returns a fresh adapter and fake
// for each subtest.
func Run(t *testing.T, newTarget func(t *testing.T) Target) {
	t.Run("OffersParseWithUnitsAndCountries", func(t *testing.T) { t.Parallel(); offersParse(t, newTarget(t)) })
	t.Run("LaunchDescribeRunningTerminate", func(t *testing.T) { t.Parallel(); lifecycle(t, newTarget(t)) })
	t.Run("LaunchIsIdempotentUnderADroppedResponse", func(t *testing.T) { t.Parallel(); droppedResponse(t, newTarget(t)) })
	t.Run("LaunchWithTheSameTokenRentsOneMachine", func(t *testing.T) { t.Parallel(); sameToken(t, newTarget(t)) })
	t.Run("TypedErrors", func(t *testing.T) { t.Parallel(); typedErrors(t, newTarget) })
	t.Run("UnknownInstanceIsNotFoundAndTerminatingItIsDone", func(t *testing.T) { t.Parallel(); unknownInstance(t, newTarget(t)) })
	t.Run("LaunchIntoAnUnknownPoolIsInvalid", func(t *testing.T) { t.Parallel(); unknownPool(t, newTarget(t)) })
	t.Run("RateLimitsAreHonoured", func(t *testing.T) { t.Parallel(); rateLimit(t, newTarget(t)) })
	t.Run("PaginationIsFollowed", func(t *testing.T) { t.Parallel(); pagination(t, newTarget(t)) })
	t.Run("UnknownCountryIsLeftOut", func(t *testing.T) { t.Parallel(); unknownCountry(t, newTarget(t)) })
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func offersParse(t *testing.T, tg Target) {
	got, err := tg.Provider.Offers(ctx(t))
	if err != nil {
		t.Fatalf("Offers: %v", err)
	}
	for i, o := range got {
		if err := o.Validate(); err != nil {
			t.Errorf("offer %d (%s): %v", i, o.Pool, err)
		}
		if o.Provider != tg.Provider.Name() {
			t.Errorf("offer %s: provider %q, want %q", o.Pool, o.Provider, tg.Provider.Name())
		}
	}
	// The control plane refuses a set with two offers under one pool id.
	if err := policy.NormalizeOffers(slices.Clone(got)); err != nil {
		t.Errorf("offers as one set: %v", err)
	}
	if len(tg.WantOffers) == 0 {
		t.Fatalf("the target states no expected offers")
	}
	want := byPool(tg.WantOffers)
	have := byPool(got)
	for _, pool := range sortedKeys(want) {
		g, ok := have[pool]
		if !ok {
			t.Errorf("pool %s missing from the offers", pool)
			continue
		}
		if d := diffOffer(want[pool], g); d != "" {
			t.Errorf("pool %s: %s", pool, d)
		}
	}
	for _, pool := range sortedKeys(have) {
		if _, ok := want[pool]; !ok {
			t.Errorf("unexpected offer %+v", have[pool])
		}
	}
}

func byPool(offers []policy.Offer) map[string]policy.Offer {
	m := map[string]policy.Offer{}
	for _, o := range offers {
		m[o.Pool] = o
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func diffOffer(want, got policy.Offer) string {
	var d []string
	field := func(name string, w, g any) {
		if fmt.Sprint(w) != fmt.Sprint(g) {
			d = append(d, fmt.Sprintf("%s = %v, want %v", name, g, w))
		}
	}
	field("provider", want.Provider, got.Provider)
	field("region", want.Region, got.Region)
	field("country", want.Country, got.Country)
	field("card", want.Card, got.Card)
	field("gpu_count", want.GPUCount, got.GPUCount)
	field("gpu_memory_gb", want.GPUMemoryGB, got.GPUMemoryGB)
	field("vcpu", want.VCPU, got.VCPU)
	field("memory_gb", want.MemoryGB, got.MemoryGB)
	field("tier", want.Tier, got.Tier)
	field("price_per_hour", want.PricePerHour, got.PricePerHour)
	field("egress_per_gb", moneyPtr(want.EgressPerGB), moneyPtr(got.EgressPerGB))
	field("availability", want.Availability, got.Availability)
	field("preemption_rate", floatPtr(want.PreemptionRate), floatPtr(got.PreemptionRate))
	field("max_duration", want.MaxDuration, got.MaxDuration)
	return strings.Join(d, "; ")
}

func moneyPtr(m *policy.Money) string {
	if m == nil {
		return "unknown"
	}
	return fmt.Sprintf("%d micros %s", m.Micros, m.Currency)
}

func floatPtr(f *float64) string {
	if f == nil {
		return "unknown"
	}
	return fmt.Sprint(*f)
}

func launch(t *testing.T, tg Target, req adapters.LaunchRequest) adapters.Instance {
	t.Helper()
	inst, err := tg.Provider.Launch(ctx(t), req)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	if inst.ProviderID == "" || inst.Pool != req.Pool || inst.ClientToken != req.ClientToken || inst.Provider != tg.Provider.Name() {
		t.Fatalf("Launch = %+v, want an id, pool %s, token %s, provider %s", inst, req.Pool, req.ClientToken, tg.Provider.Name())
	}
	return inst
}

func lifecycle(t *testing.T, tg Target) {
	c := ctx(t)
	req := Request(tg, "life")
	start := time.Now().Add(-time.Minute)
	inst := launch(t, tg, req)
	if inst.State != adapters.StatePending && inst.State != adapters.StateRunning {
		t.Errorf("launched instance state %s, want pending or running", inst.State)
	}
	tg.Fake.Boot()
	got, err := tg.Provider.Describe(c, inst.ProviderID)
	if err != nil {
		t.Fatalf("Describe: %v", err)
	}
	if got.State != adapters.StateRunning {
		t.Errorf("state after boot = %s, want running", got.State)
	}
	if got.Pool != tg.Pool || got.ClientToken != req.ClientToken || !got.Managed() || got.Tags[adapters.TagInstance] != req.Boot.InstanceID {
		t.Errorf("Describe = %+v, want pool %s, token %s and gpuq's tags", got, tg.Pool, req.ClientToken)
	}
	if got.LaunchedAt.Before(start) || got.LaunchedAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("launched_at = %s, want about now", got.LaunchedAt)
	}
	want := byPool(tg.WantOffers)[tg.Pool].PricePerHour
	if got.PricePerHour.Currency != want.Currency || got.PricePerHour.Micros <= 0 {
		t.Errorf("price charged = %s, want a positive price in %s (the offer: %s)", got.PricePerHour, want.Currency, want)
	}
	list, err := tg.Provider.Instances(c, adapters.InstanceFilter{Pool: tg.Pool})
	if err != nil {
		t.Fatalf("Instances: %v", err)
	}
	if !slices.ContainsFunc(list, func(i adapters.Instance) bool { return i.ProviderID == inst.ProviderID }) {
		t.Errorf("Instances(pool %s) = %+v, want %s among them", tg.Pool, list, inst.ProviderID)
	}
	if err := tg.Provider.Terminate(c, inst.ProviderID); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	tg.Fake.Boot()
	after, err := tg.Provider.Describe(c, inst.ProviderID)
	switch {
	case errors.Is(err, adapters.ErrNotFound):
	case err != nil:
		t.Errorf("Describe after Terminate: %v", err)
	case after.State != adapters.StateTerminated && after.State != adapters.StateStopping:
		t.Errorf("state after Terminate = %s, want stopping or terminated", after.State)
	}
	list, err = tg.Provider.Instances(c, adapters.InstanceFilter{Pool: tg.Pool})
	if err != nil {
		t.Fatalf("Instances: %v", err)
	}
	if slices.ContainsFunc(list, func(i adapters.Instance) bool { return i.ProviderID == inst.ProviderID && i.State.Gone() }) {
		t.Errorf("Instances lists the terminated %s without IncludeGone", inst.ProviderID)
	}
	if err := tg.Provider.Terminate(c, inst.ProviderID); err != nil {
		t.Errorf("second Terminate: %v, want nil (already gone is done)", err)
	}
}

func droppedResponse(t *testing.T, tg Target) {
	if !tg.Fake.DropLaunchResponse() {
		t.Skip("the provider's API cannot lose a launch response in this fake")
	}
	req := Request(tg, "dropped")
	inst := launch(t, tg, req)
	if n := tg.Fake.Rented(); n != 1 {
		t.Fatalf("rented %d machines for one launch whose response was dropped, want 1", n)
	}
	tg.Fake.Boot()
	again := launch(t, tg, req)
	if again.ProviderID != inst.ProviderID || tg.Fake.Rented() != 1 {
		t.Errorf("relaunch with the same token = %s (rented %d), want %s and still 1", again.ProviderID, tg.Fake.Rented(), inst.ProviderID)
	}
}

func sameToken(t *testing.T, tg Target) {
	req := Request(tg, "same")
	first := launch(t, tg, req)
	second := launch(t, tg, req)
	if first.ProviderID != second.ProviderID || tg.Fake.Rented() != 1 {
		t.Errorf("two launches with one token gave %s and %s, %d machines rented; want one", first.ProviderID, second.ProviderID, tg.Fake.Rented())
	}
	other := launch(t, tg, Request(tg, "other"))
	if other.ProviderID == first.ProviderID || tg.Fake.Rented() != 2 {
		t.Errorf("a launch with a new token gave %s, %d rented; want a second machine", other.ProviderID, tg.Fake.Rented())
	}
}

// calls runs op against the target once, setting up what it needs first.
func call(t *testing.T, tg Target, op Op) error {
	c := ctx(t)
	switch op {
	case OpOffers:
		_, err := tg.Provider.Offers(c)
		return err
	case OpLaunch:
		_, err := tg.Provider.Launch(c, Request(tg, "errors"))
		return err
	case OpList:
		_, err := tg.Provider.Instances(c, adapters.InstanceFilter{})
		return err
	case OpDescribe, OpTerminate:
		t.Fatalf("call %s through callOn", op)
	}
	return nil
}

func typedErrors(t *testing.T, newTarget func(t *testing.T) Target) {
	probe := newTarget(t)
	for _, kind := range AllErrorKinds {
		ops := probe.Errors[kind]
		if len(ops) == 0 {
			continue
		}
		for _, op := range ops {
			t.Run(strings.ReplaceAll(kind.Error(), " ", "-")+"/"+string(op), func(t *testing.T) {
				t.Parallel()
				tg := newTarget(t)
				var id string
				if op == OpDescribe || op == OpTerminate {
					id = launch(t, tg, Request(tg, "victim")).ProviderID
				}
				// Inject more failures than any retry policy makes calls,
				// so the kind surfaces.
				if !tg.Fake.Fail(op, kind, 100) {
					t.Fatalf("the target lists %v for %s but its fake cannot produce it", kind, op)
				}
				var err error
				switch op {
				case OpDescribe:
					_, err = tg.Provider.Describe(ctx(t), id)
				case OpTerminate:
					err = tg.Provider.Terminate(ctx(t), id)
				default:
					err = call(t, tg, op)
				}
				if !errors.Is(err, kind) {
					t.Fatalf("%s failing with %v returned %v", op, kind, err)
				}
				var pe *adapters.ProviderError
				if !errors.As(err, &pe) || pe.Provider != tg.Provider.Name() {
					t.Errorf("error %v is not a ProviderError of %s", err, tg.Provider.Name())
				}
				if kind == adapters.ErrCapacityUnavailable && op == OpLaunch && pe != nil && pe.Pool != tg.Pool {
					t.Errorf("no-capacity error names pool %q, want %q", pe.Pool, tg.Pool)
				}
				if kind == adapters.ErrRateLimited && pe != nil && pe.RetryAfter < tg.RetryAfter {
					t.Errorf("rate-limited error carries retry-after %s, want the provider's %s", pe.RetryAfter, tg.RetryAfter)
				}
				if op == OpLaunch && kind != adapters.ErrProviderDown && tg.Fake.Rented() != 0 {
					t.Errorf("a launch refused with %v rented %d machines", kind, tg.Fake.Rented())
				}
			})
		}
	}
	var missing []string
	for _, kind := range AllErrorKinds {
		if kind != adapters.ErrNotFound && len(probe.Errors[kind]) == 0 {
			missing = append(missing, kind.Error())
		}
	}
	if len(missing) > 0 {
		t.Logf("the provider documents no error for: %s", strings.Join(missing, ", "))
	}
}

func unknownInstance(t *testing.T, tg Target) {
	_, err := tg.Provider.Describe(ctx(t), "does-not-exist-0000")
	if !errors.Is(err, adapters.ErrNotFound) {
		t.Errorf("Describe(unknown) = %v, want ErrNotFound", err)
	}
	if err := tg.Provider.Terminate(ctx(t), "does-not-exist-0000"); err != nil {
		t.Errorf("Terminate(unknown) = %v, want nil: an instance the provider no longer knows is gone", err)
	}
}

func unknownPool(t *testing.T, tg Target) {
	req := Request(tg, "nopool")
	req.Pool, req.Boot.Pool = "no-such-pool", "no-such-pool"
	_, err := tg.Provider.Launch(ctx(t), req)
	if !errors.Is(err, adapters.ErrInvalidRequest) {
		t.Errorf("Launch(unknown pool) = %v, want ErrInvalidRequest", err)
	}
	if tg.Fake.Rented() != 0 {
		t.Errorf("rented %d machines for an unknown pool", tg.Fake.Rented())
	}
}

func rateLimit(t *testing.T, tg Target) {
	if !tg.Fake.Fail(OpLaunch, adapters.ErrRateLimited, 1) {
		t.Skip("the provider documents no rate limit on launches")
	}
	inst := launch(t, tg, Request(tg, "limited"))
	calls := tg.Fake.Calls(OpLaunch)
	if len(calls) < 2 {
		t.Fatalf("launch %s after a rate limit with %d launch calls, want a retry", inst.ProviderID, len(calls))
	}
	// Retry-After is whole seconds on the wire; allow the clock's grain.
	if gap := calls[len(calls)-1].Sub(calls[0]); gap < tg.RetryAfter-50*time.Millisecond {
		t.Errorf("retried %s after the rate limit, before the %s the provider asked for", gap, tg.RetryAfter)
	}
	if tg.Fake.Rented() != 1 {
		t.Errorf("rented %d machines, want 1", tg.Fake.Rented())
	}
}

func pagination(t *testing.T, tg Target) {
	if !tg.Fake.SetPageSize(1) {
		t.Skip("the provider's listings are not paginated")
	}
	var want []string
	for i := range 3 {
		want = append(want, launch(t, tg, Request(tg, fmt.Sprintf("page%d", i))).ProviderID)
	}
	list, err := tg.Provider.Instances(ctx(t), adapters.InstanceFilter{Pool: tg.Pool})
	if err != nil {
		t.Fatalf("Instances: %v", err)
	}
	var got []string
	for _, i := range list {
		got = append(got, i.ProviderID)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Instances over pages of 1 = %v, want %v", got, want)
	}
	offers, err := tg.Provider.Offers(ctx(t))
	if err != nil || len(offers) != len(tg.WantOffers) {
		t.Errorf("Offers over pages of 1 = %d offers, %v; want %d", len(offers), err, len(tg.WantOffers))
	}
}

func unknownCountry(t *testing.T, tg Target) {
	before, err := tg.Provider.Offers(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !tg.Fake.AddUnknownLocation() {
		t.Skip("the provider has no location outside the adapter's table")
	}
	after, err := tg.Provider.Offers(ctx(t))
	if err != nil {
		t.Fatalf("Offers with an unknown location: %v", err)
	}
	if len(after) != len(before) {
		t.Errorf("an unknown location changed the offers from %d to %d: its country was guessed", len(before), len(after))
	}
	for _, o := range after {
		if len(o.Country) != 2 {
			t.Errorf("offer %s has country %q", o.Pool, o.Country)
		}
	}
}
