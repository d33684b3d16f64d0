package policy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/policy"
)

var now = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

func money(s string) policy.Money {
	m, err := policy.ParseMoney(s)
	if err != nil {
		panic(err)
	}
	return m
}

func ptr[T any](v T) *T { return &v }

// baseOffer is feasible for baseJob under baseRules.
func baseOffer() policy.Offer {
	return policy.Offer{
		Provider: "hetzner", Pool: "hz-fsn-h100", Region: "fsn1", Country: "DE", Card: "H100",
		GPUCount: 2, GPUMemoryGB: 80, VCPU: 32, MemoryGB: 256, Tier: policy.TierOnDemand,
		PricePerHour: money("2.00 EUR"), EgressPerGB: ptr(money("0.01 EUR")), Availability: policy.Available,
	}
}

func baseJob() policy.Requirements {
	return policy.Requirements{
		Project: "imaging", Labels: map[string]string{"data": "personal"},
		GPUCount: 2, Cards: []string{"H100", "A100-80GB"}, MinGPUMemoryGB: 80, VCPU: 16, MemoryGB: 128,
		Tier: policy.TierOnDemand, Residency: "EEA", MaxPricePerHour: ptr(money("2.50 EUR")),
		Budget: ptr(money("100 EUR")), ExpectedDuration: 10 * time.Hour,
		Providers: []string{"hetzner", "scaleway"}, Regions: []string{"fsn*", "fr-*"},
		Deadline: now.Add(24 * time.Hour),
	}
}

func baseRules() policy.Rules {
	return policy.Rules{
		ExchangeRates: map[string]float64{"USD": 0.9},
		Rules: []policy.Rule{
			{Name: "personal-data", Labels: map[string]string{"data": "personal"}, Residency: "EU"},
			{Name: "no-cheapgpu", Project: "imag*", DenyProviders: []string{"cheapgpu"}},
		},
		Budgets: []policy.Budget{{Project: "imaging", Period: "month", Cap: money("1000 EUR"), Spent: money("500 EUR"), Reserved: money("100 EUR")}},
	}
}

func TestPlaceRejectsEachReasonWithItsMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		job     func(*policy.Requirements)
		offer   func(*policy.Offer)
		rules   func(*policy.Rules)
		code    policy.ReasonCode
		message string
	}{
		{name: "outside the residency a rule requires", offer: func(o *policy.Offer) { o.Region, o.Country = "us-east-1", "US"; o.Provider = "scaleway" },
			job: func(j *policy.Requirements) { j.Regions = nil }, code: policy.ReasonResidency,
			message: "region us-east-1 (US) outside residency EU required by rule personal-data and job"},
		{name: "a job may not widen the rule's class", offer: func(o *policy.Offer) { o.Country = "NO" },
			code: policy.ReasonResidency, message: "region fsn1 (NO) outside residency EU required by rule personal-data and job"},
		{name: "unknown country satisfies no class", offer: func(o *policy.Offer) { o.Country = "" },
			code: policy.ReasonResidency, message: "region fsn1 (country unknown) outside residency EU"},
		{name: "job narrows residency to its own class", job: func(j *policy.Requirements) { j.Residency = "CH" },
			code: policy.ReasonResidency, message: "outside residency EU∩CH required by rule personal-data and job"},
		{name: "provider denied by rule", offer: func(o *policy.Offer) { o.Provider = "cheapgpu" },
			job: func(j *policy.Requirements) { j.Providers = nil }, code: policy.ReasonProviderRule, message: "provider cheapgpu denied by rule no-cheapgpu"},
		{name: "provider outside a rule's allow list", rules: func(r *policy.Rules) { r.Rules[1].AllowProviders = []string{"scaleway"} },
			code: policy.ReasonProviderRule, message: "provider hetzner not allowed by rule no-cheapgpu (scaleway)"},
		{name: "provider outside the job's globs", job: func(j *policy.Requirements) { j.Providers = []string{"scw*"} },
			code: policy.ReasonProvider, message: "provider hetzner not in the job's providers (scw*)"},
		{name: "region outside the job's globs", job: func(j *policy.Requirements) { j.Regions = []string{"nbg*"} },
			code: policy.ReasonRegion, message: "region fsn1 not in the job's regions (nbg*)"},
		{name: "spot offer for on-demand job", offer: func(o *policy.Offer) { o.Tier = policy.TierSpot },
			code: policy.ReasonTier, message: "tier spot, job accepts on-demand"},
		{name: "on-demand offer for spot job", job: func(j *policy.Requirements) { j.Tier = policy.TierSpot },
			code: policy.ReasonTier, message: "tier on-demand, job accepts spot"},
		{name: "no capacity", offer: func(o *policy.Offer) { o.Availability = policy.Unavailable },
			code: policy.ReasonAvailability, message: "no capacity (availability none)"},
		{name: "card not accepted", offer: func(o *policy.Offer) { o.Card = "L4" },
			code: policy.ReasonCard, message: "card L4 (80 GB) not accepted (H100, A100-80GB)"},
		{name: "too few GPUs", offer: func(o *policy.Offer) { o.GPUCount = 1 },
			code: policy.ReasonGPUCount, message: "1 GPUs, job needs 2"},
		{name: "too little GPU memory", offer: func(o *policy.Offer) { o.GPUMemoryGB = 40 },
			code: policy.ReasonGPUMemory, message: "card H100 has 40 GB, job needs 80 GB"},
		{name: "too few vCPU", offer: func(o *policy.Offer) { o.VCPU = 8 },
			code: policy.ReasonVCPU, message: "8 vCPU, job needs 16"},
		{name: "too little memory", offer: func(o *policy.Offer) { o.MemoryGB = 64 },
			code: policy.ReasonMemory, message: "64 GB memory, job needs 128 GB"},
		{name: "currency without exchange rate", offer: func(o *policy.Offer) { o.PricePerHour = money("300 JPY") },
			code: policy.ReasonCurrency, message: "price in a currency with no exchange rate to EUR"},
		{name: "over the price cap", offer: func(o *policy.Offer) { o.PricePerHour = money("3.10 EUR") },
			code: policy.ReasonPriceCap, message: "price 3.10 EUR/h over cap 2.50 EUR/h"},
		{name: "over the price cap after conversion", offer: func(o *policy.Offer) { o.PricePerHour = money("3.00 USD") },
			code: policy.ReasonPriceCap, message: "price 3.00 USD/h (2.70 EUR) over cap 2.50 EUR/h"},
		{name: "over the job budget", job: func(j *policy.Requirements) { j.Budget = ptr(money("15 EUR")) },
			code: policy.ReasonJobBudget, message: "estimated cost 20.00 EUR over the job budget 15.00 EUR"},
		{name: "over the project's remaining budget", rules: func(r *policy.Rules) { r.Budgets[0].Spent = money("890 EUR") },
			code: policy.ReasonProjectBudget, message: "estimated cost 20.00 EUR over the 10.00 EUR left of budget imaging (month cap 1000.00 EUR)"},
		{name: "egress counts against the budget", job: func(j *policy.Requirements) {
			j.Budget = ptr(money("25 EUR"))
			j.Inputs = []policy.Input{{Provider: "aws", Region: "eu-west-1", Bytes: 600_000_000_000}}
		}, rules: func(r *policy.Rules) {
			r.EgressPrices = []policy.EgressPrice{{Provider: "aws", PerGB: money("0.01 EUR")}}
		}, code: policy.ReasonJobBudget, message: "estimated cost 26.00 EUR over the job budget 25.00 EUR"},
		{name: "too slow for the deadline", job: func(j *policy.Requirements) { j.Deadline = now.Add(9 * time.Hour) },
			code: policy.ReasonDeadline, message: "expected run time 10h0m0s ends after the deadline 2026-03-02T18:00:00Z"},
		{name: "spot restart overhead misses the deadline", offer: func(o *policy.Offer) { o.Tier = policy.TierSpot; o.PreemptionRate = ptr(0.5) },
			job: func(j *policy.Requirements) {
				j.Tier = policy.TierSpot
				j.Deadline = now.Add(10*time.Hour + 30*time.Minute)
			},
			code: policy.ReasonDeadline, message: "expected run time 10h50m0s ends after the deadline"},
		{name: "malformed pool", offer: func(o *policy.Offer) { o.Pool = "eu.h100" },
			code: policy.ReasonInvalidOffer, message: `invalid offer: pool: "eu.h100" must match ^[A-Za-z0-9_-]+$`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job, offer, rules := baseJob(), baseOffer(), baseRules()
			if tt.job != nil {
				tt.job(&job)
			}
			if tt.offer != nil {
				tt.offer(&offer)
			}
			if tt.rules != nil {
				tt.rules(&rules)
			}
			d, err := policy.Place(job, []policy.Offer{offer}, rules, now)
			var refusal *policy.NoPlacementError
			if !errors.As(err, &refusal) {
				t.Fatalf("Place = %+v, %v; want a NoPlacementError", d.Chosen, err)
			}
			got := refusal.Decision.ReasonsOf(refusal.Decision.Rejected()[0])
			for _, r := range got {
				if r.Code == tt.code {
					if !strings.Contains(r.Message, tt.message) {
						t.Errorf("message %q does not contain %q", r.Message, tt.message)
					}
					return
				}
			}
			t.Errorf("reasons %+v lack code %s", got, tt.code)
		})
	}
}

func TestPlaceAcceptsTheBaseOfferWithItsCost(t *testing.T) {
	t.Parallel()
	job := baseJob()
	job.Inputs = []policy.Input{{Region: "fsn1", Bytes: 1e12}, {Region: "eu-west-1", Bytes: 100_000_000_000}}
	rules := baseRules()
	rules.EgressPrices = []policy.EgressPrice{{Provider: "aws", Region: "eu-*", PerGB: money("0.01 EUR")}}
	d, err := policy.Place(job, []policy.Offer{baseOffer()}, rules, now)
	if err != nil {
		t.Fatal(err)
	}
	c := d.Chosen.Cost
	want := []string{"20.00 EUR", "0.00 EUR", "1.00 EUR", "21.00 EUR"}
	got := []string{c.Compute.String(), c.SpotOverhead.String(), c.Egress.String(), c.Total.String()}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("compute, overhead, egress, total = %v, want %v", got, want)
	}
	if d.Residency.Class != "EU" || !reflect.DeepEqual(d.Residency.ImposedBy, []string{"rule personal-data", "job"}) {
		t.Errorf("residency = %+v", d.Residency)
	}
	if !d.Residency.Contains("DE") || d.Residency.Contains("NO") || d.Residency.Contains("") {
		t.Errorf("residency %v membership is wrong", d.Residency.Countries)
	}
}

// An attempt is killed at its timeout, so a job is never charged for
// longer than its timeout, whatever its expected duration or the default;
// the least charged run time still applies.
func TestPlaceChargesAJobAtMostItsTimeout(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		expected, timeout time.Duration
		compute           string
	}{
		{10 * time.Hour, 0, "20.00 EUR"},
		{10 * time.Hour, 2 * time.Hour, "4.00 EUR"},
		{time.Hour, 2 * time.Hour, "2.00 EUR"},
		{0, 90 * time.Second, "0.05 EUR"},     // the default hour, cut to 90 s
		{0, 10 * time.Second, "0.033333 EUR"}, // the least charged minute
	} {
		job := baseJob()
		job.ExpectedDuration, job.Timeout = tt.expected, tt.timeout
		d, err := policy.Place(job, []policy.Offer{baseOffer()}, baseRules(), now)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Chosen.Cost.Compute.String(); got != tt.compute {
			t.Errorf("expected %s, timeout %s: compute %s, want %s", tt.expected, tt.timeout, got, tt.compute)
		}
	}
}

func TestPlaceFlagsUnknownEgressAndPreemptionRate(t *testing.T) {
	t.Parallel()
	job := baseJob()
	job.Tier = policy.TierSpot
	job.Inputs = []policy.Input{{Region: "eu-west-1", Bytes: 50_000_000_000}}
	offer := baseOffer()
	offer.Tier, offer.EgressPerGB = policy.TierSpot, nil
	d, err := policy.Place(job, []policy.Offer{offer}, baseRules(), now)
	if err != nil {
		t.Fatal(err)
	}
	c := d.Chosen.Cost
	if !c.EgressUnknown || !c.PreemptionRateAssumed || c.Egress.Micros != 0 {
		t.Fatalf("cost = %+v, want unknown egress and assumed rate flagged", c)
	}
	// 10 h × 0.1/h = 1 preemption × 10 min at 2.00 EUR/h.
	if c.SpotOverhead.String() != "0.333333 EUR" {
		t.Errorf("spot overhead = %s", c.SpotOverhead)
	}
	if len(c.Notes) != 2 || !strings.Contains(c.Notes[0], "egress price unknown where 50 GB of inputs moved into fsn1 is stored") {
		t.Errorf("notes = %q", c.Notes)
	}
}

func TestPlaceRanksByCostThenAvailabilityThenCard(t *testing.T) {
	t.Parallel()
	mk := func(pool, card, price string, avail policy.Availability) policy.Offer {
		o := baseOffer()
		o.Pool, o.Card, o.PricePerHour, o.Availability = pool, card, money(price), avail
		return o
	}
	offers := []policy.Offer{
		mk("d-a100-scarce", "A100-80GB", "1.00 EUR", policy.Scarce),
		mk("c-a100", "A100-80GB", "1.00 EUR", policy.Available),
		mk("b-h100", "H100", "1.00 EUR", policy.Available),
		mk("a-dear", "H100", "1.50 EUR", policy.Available),
		mk("e-h100-unknown", "H100", "1.00 EUR", policy.AvailabilityUnknown),
	}
	d, err := policy.Place(baseJob(), offers, baseRules(), now)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{d.Chosen.Offer.Pool}
	for _, a := range d.Alternatives {
		got = append(got, a.Offer.Pool)
	}
	want := []string{"b-h100", "c-a100", "d-a100-scarce", "e-h100-unknown", "a-dear"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ranking = %v, want %v", got, want)
	}
}

func TestPlaceKeepsAtMostMaxAlternatives(t *testing.T) {
	t.Parallel()
	var offers []policy.Offer
	for _, p := range []string{"a", "b", "c", "d", "e"} {
		o := baseOffer()
		o.Pool = p
		offers = append(offers, o)
	}
	rules := baseRules()
	rules.MaxAlternatives = 2
	d, err := policy.Place(baseJob(), offers, rules, now)
	if err != nil {
		t.Fatal(err)
	}
	if d.Feasible != 5 || len(d.Alternatives) != 2 || d.Alternatives[1].Offer.Pool != "c" {
		t.Errorf("feasible %d, alternatives %+v", d.Feasible, d.Alternatives)
	}
}

func TestNoPlacementCountsReasonsAndNamesTheBestRelaxation(t *testing.T) {
	t.Parallel()
	var offers []policy.Offer
	add := func(n int, change func(*policy.Offer)) {
		for range n {
			o := baseOffer()
			o.Pool = "p" + string(rune('a'+len(offers)))
			change(&o)
			offers = append(offers, o)
		}
	}
	add(12, func(o *policy.Offer) { o.Region, o.Country = "fsn1", "US" })
	add(3, func(o *policy.Offer) { o.PricePerHour = money("3.10 EUR") })
	add(2, func(o *policy.Offer) { o.GPUMemoryGB = 40 })
	_, err := policy.Place(baseJob(), offers, baseRules(), now)
	want := "no placement among 17 offers: 12 offers outside residency EU; 3 over the price cap 2.50 EUR/h; " +
		"2 lack 80 GB cards; relaxing residency EU (rule personal-data, job) would make 12 offers feasible"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant  %s", err, want)
	}
	var refusal *policy.NoPlacementError
	if !errors.As(err, &refusal) || len(refusal.Decision.Rejected()) != 17 || refusal.Relaxation.Code != policy.ReasonResidency {
		t.Errorf("refusal = %+v", refusal)
	}
}

func TestPlaceRefusesInvalidJobsNamingTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		job  func(*policy.Requirements)
		want string
	}{
		{"negative gpu count", func(j *policy.Requirements) { j.GPUCount = -1 }, "job.gpu_count: must be 0 or more, got -1"},
		{"unknown tier", func(j *policy.Requirements) { j.Tier = "cheap" }, `job.tier: must be spot, on-demand or spot-then-on-demand, got "cheap"`},
		{"malformed region glob", func(j *policy.Requirements) { j.Regions = []string{"eu-["} }, `job.regions[0]: malformed glob "eu-["`},
		{"undefined residency", func(j *policy.Requirements) { j.Residency = "EUU" }, `job.residency: undefined residency class "EUU"`},
		{"negative timeout", func(j *policy.Requirements) { j.Timeout = -time.Second }, "job.timeout: must not be negative, got -1s"},
		{"cap in unknown currency", func(j *policy.Requirements) { j.MaxPricePerHour = ptr(money("2 GBP")) }, `job.max_price_per_hour: unknown currency "GBP"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := baseJob()
			tt.job(&job)
			_, err := policy.Place(job, []policy.Offer{baseOffer()}, baseRules(), now)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("err = %v, want prefix %q", err, tt.want)
			}
		})
	}
}

func TestDecisionRoundTripsThroughJSON(t *testing.T) {
	t.Parallel()
	offers := []policy.Offer{baseOffer(), func() policy.Offer { o := baseOffer(); o.Pool, o.Country = "us", "US"; return o }()}
	d, err := policy.Place(baseJob(), offers, baseRules(), now)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back policy.Decision
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	again, err := json.Marshal(back)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(data) || !reflect.DeepEqual(back.Rejected(), d.Rejected()) || !reflect.DeepEqual(back.Reasons(), d.Reasons()) ||
		back.RejectedCount() != 1 || !reflect.DeepEqual(back.Chosen, d.Chosen) {
		t.Errorf("round trip changed the decision:\n%s\n%s", again, data)
	}
}

func TestRejectionsShareEachDistinctReasonWordedOnce(t *testing.T) {
	t.Parallel()
	var offers []policy.Offer
	for i := range 12 {
		o := baseOffer()
		o.Pool, o.Region, o.Country = fmt.Sprintf("us-%d", i), "us-east-1", "US"
		if i%2 == 1 {
			o.PricePerHour = money("3.10 EUR")
		}
		offers = append(offers, o)
	}
	_, err := policy.Place(baseJob(), offers, baseRules(), now)
	var refusal *policy.NoPlacementError
	if !errors.As(err, &refusal) {
		t.Fatalf("err = %v, want a refusal", err)
	}
	d := refusal.Decision
	if len(d.Rejected()) != 12 || len(d.Reasons()) != 3 {
		t.Fatalf("%d rejections with %d distinct reasons %+v, want 12 with 3", len(d.Rejected()), len(d.Reasons()), d.Reasons())
	}
	for i, r := range d.Rejected() {
		got := d.ReasonsOf(r)
		if r.Offer != i || d.Offers[r.Offer].Pool != offers[i].Pool {
			t.Errorf("rejection %d names offer %d", i, r.Offer)
		}
		want := []policy.ReasonCode{policy.ReasonResidency, policy.ReasonRegion}
		if i%2 == 1 {
			want = append(want, policy.ReasonPriceCap)
		}
		var codes []policy.ReasonCode
		for _, reason := range got {
			codes = append(codes, reason.Code)
		}
		if !reflect.DeepEqual(codes, want) {
			t.Errorf("%s reasons %+v, want codes %v", offers[i].Pool, got, want)
		}
		if got[0].Message != "region us-east-1 (US) outside residency EU required by rule personal-data and job" {
			t.Errorf("%s residency reason %q", offers[i].Pool, got[0].Message)
		}
	}
}

func TestPlaceComparesResourceCountsBeyondInt32Exactly(t *testing.T) {
	t.Parallel()
	job := baseJob()
	job.VCPU = 1<<31 + 10
	a, b, c := baseOffer(), baseOffer(), baseOffer()
	a.Pool, a.VCPU = "a", 1<<31+1
	b.Pool, b.VCPU = "b", 1<<31+2
	c.Pool, c.VCPU = "c", 1<<31+10
	d, err := policy.Place(job, []policy.Offer{a, b, c}, baseRules(), now)
	if err != nil {
		t.Fatal(err)
	}
	if d.Chosen.Offer.Pool != "c" || len(d.Rejected()) != 2 {
		t.Fatalf("chosen %s, %d rejected; want c, 2", d.Chosen.Offer.Pool, len(d.Rejected()))
	}
	for i, want := range []string{"2147483649 vCPU, job needs 2147483658", "2147483650 vCPU, job needs 2147483658"} {
		if got := d.ReasonsOf(d.Rejected()[i]); len(got) != 1 || got[0].Message != want {
			t.Errorf("%s: reasons %+v, want %q", d.Offers[d.Rejected()[i].Offer].Pool, got, want)
		}
	}
}

// The outputs of another job that a job reads bind it to their residency
// (Requirements.DataResidency): on top of its own, named in the decision as
// who required it, and refused offers say so.
func TestPlaceKeepsAJobInsideTheResidencyOfTheDataItReads(t *testing.T) {
	t.Parallel()
	us := baseOffer()
	us.Pool, us.Region, us.Country, us.PricePerHour = "us-h100", "us-east-1", "US", money("1.00 EUR")
	job := baseJob()
	job.Labels, job.Residency, job.Providers, job.Regions = nil, "", nil, nil
	rules := baseRules()
	d, err := policy.Place(job, []policy.Offer{baseOffer(), us}, rules, now)
	if err != nil || d.Chosen.Offer.Pool != "us-h100" {
		t.Fatalf("without data residency: %+v, %v; want the cheaper us-h100", d.Chosen, err)
	}
	job.DataResidency = []policy.DataResidency{{Class: "EU", Countries: []string{"AT", "DE", "FR"}, By: "inputs[0] (job j1)"}}
	d, err = policy.Place(job, []policy.Offer{baseOffer(), us}, rules, now)
	if err != nil || d.Chosen.Offer.Pool != "hz-fsn-h100" {
		t.Fatalf("with data residency: %+v, %v; want hz-fsn-h100", d.Chosen, err)
	}
	if d.Residency.Class != "EU" || !reflect.DeepEqual(d.Residency.ImposedBy, []string{"inputs[0] (job j1)"}) || !reflect.DeepEqual(d.Residency.Countries, []string{"AT", "DE", "FR"}) {
		t.Errorf("residency = %+v", d.Residency)
	}
	// With the job's own class, the intersection.
	job.Residency = "EEA"
	job.DataResidency = append(job.DataResidency, policy.DataResidency{Class: "DACH", Countries: []string{"AT", "CH", "DE"}, By: "inputs[1] (job j2)"})
	d, err = policy.Place(job, []policy.Offer{baseOffer(), us}, rules, now)
	if err != nil {
		t.Fatal(err)
	}
	if d.Residency.Class != "EEA∩EU∩DACH" || !reflect.DeepEqual(d.Residency.Countries, []string{"AT", "DE"}) ||
		!reflect.DeepEqual(d.Residency.ImposedBy, []string{"job", "inputs[0] (job j1)", "inputs[1] (job j2)"}) {
		t.Errorf("residency = %+v", d.Residency)
	}
	rejected := d.ReasonsOf(d.Rejected()[0])
	if len(rejected) == 0 || !strings.Contains(rejected[0].Message, "region us-east-1 (US) outside residency EEA∩EU∩DACH required by job and inputs[0] (job j1) and inputs[1] (job j2)") {
		t.Errorf("the US offer's reasons: %+v", rejected)
	}
	for _, bad := range []policy.DataResidency{{Class: "EU", Countries: []string{"DE"}}, {Countries: []string{"DE"}, By: "x"}, {Class: "EU", Countries: []string{"Germany"}, By: "x"}} {
		job.DataResidency = []policy.DataResidency{bad}
		if err := job.Validate(); err == nil || !strings.Contains(err.Error(), "job.data_residency[0]") {
			t.Errorf("Validate of %+v = %v, want an error naming job.data_residency[0]", bad, err)
		}
	}
}
