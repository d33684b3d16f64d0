package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

// staticOffers is an offer source that always offers the same list.
type staticOffers []policy.Offer

func (s staticOffers) Name() string { return "static" }

func (s staticOffers) Offers(context.Context) ([]policy.Offer, error) { return s, nil }

func genOffers(t *rapid.T) []policy.Offer {
	n := rapid.IntRange(0, 16).Draw(t, "offers")
	offers := make([]policy.Offer, n)
	for i := range offers {
		offers[i] = policy.Offer{
			Provider:     rapid.SampledFrom([]string{"aws", "hetzner", "cheapgpu"}).Draw(t, "provider"),
			Pool:         fmt.Sprintf("o%d", i),
			Region:       rapid.SampledFrom([]string{"eu-1", "eu-2", "us-1"}).Draw(t, "region"),
			Country:      rapid.SampledFrom([]string{"DE", "FR", "SE", "CH", "US"}).Draw(t, "country"),
			Card:         rapid.SampledFrom([]string{"H100", "L4", "cpu"}).Draw(t, "card"),
			GPUCount:     rapid.IntRange(0, 8).Draw(t, "gpus"),
			GPUMemoryGB:  rapid.SampledFrom([]int{0, 24, 80}).Draw(t, "gpu_mem"),
			VCPU:         rapid.IntRange(1, 64).Draw(t, "vcpu"),
			MemoryGB:     rapid.IntRange(1, 512).Draw(t, "mem"),
			Tier:         rapid.SampledFrom([]policy.Tier{policy.TierSpot, policy.TierOnDemand}).Draw(t, "tier"),
			PricePerHour: policy.Money{Micros: rapid.Int64Range(1, 5_000_000).Draw(t, "price"), Currency: rapid.SampledFrom([]string{"EUR", "USD"}).Draw(t, "currency")},
			Availability: rapid.SampledFrom([]policy.Availability{policy.Available, policy.Scarce, policy.Unavailable}).Draw(t, "avail"),
		}
	}
	return offers
}

func genSpec(t *rapid.T, now time.Time) *queue.Spec {
	var b strings.Builder
	fmt.Fprintf(&b, "project: %s\ncommand: [/bin/true]\n", rapid.SampledFrom([]string{"vision", "nlp"}).Draw(t, "project"))
	fmt.Fprintf(&b, "placement: {tier: %s", rapid.SampledFrom([]string{"spot", "on-demand", "spot-then-on-demand"}).Draw(t, "job_tier"))
	if rapid.IntRange(0, 2).Draw(t, "residency") == 0 {
		fmt.Fprintf(&b, ", residency: %s", rapid.SampledFrom([]string{"EU", "CH"}).Draw(t, "class"))
	}
	b.WriteString("}\n")
	if gpus := rapid.SampledFrom([]int{0, 0, 1, 2}).Draw(t, "job_gpus"); gpus > 0 {
		fmt.Fprintf(&b, "resources: {gpu: {count: %d}}\n", gpus)
	}
	if rapid.IntRange(0, 2).Draw(t, "cap") == 0 {
		fmt.Fprintf(&b, "budget: {max_price_per_hour: \"%d.50 EUR\"}\n", rapid.IntRange(0, 4).Draw(t, "cap_eur"))
	}
	minutes := rapid.IntRange(1, 24*60).Draw(t, "minutes")
	fmt.Fprintf(&b, "expected_duration: %dm\n", minutes)
	if rapid.Bool().Draw(t, "deadline") {
		slack := time.Duration(rapid.IntRange(0, 48*60).Draw(t, "slack_minutes")) * time.Minute
		fmt.Fprintf(&b, "deadline: %s\n", now.Add(time.Duration(minutes)*time.Minute+slack).Format(time.RFC3339))
	}
	spec, err := queue.ParseSpec([]byte(b.String()))
	if err != nil {
		t.Fatalf("generated spec %q: %v", b.String(), err)
	}
	return spec
}

func genRules(t *rapid.T) policy.Rules {
	r := policy.Rules{ExchangeRates: map[string]float64{"USD": 0.9}}
	if rapid.Bool().Draw(t, "deny") {
		r.Rules = []policy.Rule{{Name: "deny", Project: "*", DenyProviders: []string{"cheap*"}}}
	}
	if rapid.Bool().Draw(t, "budget") {
		r.Budgets = []policy.Budget{{Project: "vision", Period: "month", Cap: policy.Money{Micros: rapid.Int64Range(0, 50_000_000).Draw(t, "budget_cap"), Currency: "EUR"}}}
	}
	return r
}

// The scheduler's placer and `gpuq plan` build their offer set with
// CollectOffers and decide with Decide; for the same spec, offers and rules
// they must reach the same decision, or refuse with the same reason.
func TestSchedulerAndPlanReachTheSameDecision(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	rapid.Check(t, func(t *rapid.T) {
		offers, spec, rules := genOffers(t), genSpec(t, now), genRules(t)
		sources := []adapters.OfferSource{staticOffers(offers)}

		placer := &control.PolicyPlacer{Sources: sources, Rules: rules, Now: func() time.Time { return now }}
		placed, placeErr := placer.Place(context.Background(), &queue.Job{ID: uuid.New(), Spec: spec, SubmittedAt: now}, nil)

		set, err := control.CollectOffers(context.Background(), sources)
		if err != nil {
			t.Fatal(err)
		}
		job, err := control.PolicyJob(spec)
		if err != nil {
			t.Fatal(err)
		}
		planned, planErr := control.Decide(control.Question{Job: job, SubmittedAt: now, Rules: rules, Offers: set, Now: now})

		var rej *queue.RejectionError
		if errors.As(placeErr, &rej) || planErr != nil {
			if rej == nil || planErr == nil || rej.Reason != planErr.Error() {
				t.Fatalf("scheduler: %v; plan: %v", placeErr, planErr)
			}
			return
		}
		if placeErr != nil {
			t.Fatal(placeErr)
		}
		// The scheduler stores the compact form of the decision plan makes,
		// and what replays it into plan's full decision. (The full form is
		// written first: wording reasons for the compact form first would
		// number them in another order.)
		wantFull, err := json.Marshal(planned)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(planned.Compact(control.DecisionAlternatives, control.DecisionExamples))
		if err != nil {
			t.Fatal(err)
		}
		if string(placed.Decision) != string(want) {
			t.Fatalf("scheduler decided\n%s\nplan decided\n%s", placed.Decision, want)
		}
		replayed, err := control.Replay(placed.Replay)
		if err != nil {
			t.Fatal(err)
		}
		full, err := json.Marshal(replayed)
		if err != nil {
			t.Fatal(err)
		}
		if string(full) != string(wantFull) {
			t.Fatalf("replayed\n%s\nplan decided\n%s", full, wantFull)
		}
	})
}

func TestPolicyJobCarriesCardsInputsAndAllowGPUForCPU(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, `command: [run]
resources: {cpu: 4}
placement: {allow_gpu_for_cpu: true}
inputs: [{name: frames, provider: aws, region: us-east-1, country: us, bytes: 1000}]
`)
	job, err := control.PolicyJob(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := policy.Input{Name: "frames", Provider: "aws", Region: "us-east-1", Country: "us", Bytes: 1000}
	if !job.AllowGPUForCPU || len(job.Inputs) != 1 || job.Inputs[0] != want {
		t.Errorf("requirements = %+v", job)
	}
}
