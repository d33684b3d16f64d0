package policy_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpuq/gpuq/policy"
)

// benchWorld builds n offers over many providers, regions, cards and
// prices, and rules with nRules rules (a tenth of them match the job).
func benchWorld(n, nRules int) (policy.Requirements, []policy.Offer, policy.Rules) {
	rng := rand.New(rand.NewPCG(1, 2))
	countries := []string{"DE", "FR", "NL", "SE", "FI", "PL", "IE", "US", "US", "CA", "GB", "CH", "NO", "JP", "SG"}
	cards := []struct {
		name string
		mem  int
	}{{"H100", 80}, {"A100-80GB", 80}, {"A100-40GB", 40}, {"L4", 24}, {"T4", 16}, {"H200", 141}}
	offers := make([]policy.Offer, n)
	for i := range offers {
		c := cards[rng.IntN(len(cards))]
		country := countries[rng.IntN(len(countries))]
		tier := policy.TierOnDemand
		if rng.IntN(2) == 0 {
			tier = policy.TierSpot
		}
		currency := "EUR"
		if rng.IntN(3) == 0 {
			currency = "USD"
		}
		o := policy.Offer{
			Provider:     fmt.Sprintf("p%d", rng.IntN(20)),
			Pool:         fmt.Sprintf("pool-%d", i),
			Region:       fmt.Sprintf("%s-%d", country, rng.IntN(4)),
			Country:      country,
			Card:         c.name,
			GPUCount:     1 << rng.IntN(4),
			GPUMemoryGB:  c.mem,
			VCPU:         8 << rng.IntN(3),
			MemoryGB:     64 << rng.IntN(3),
			Tier:         tier,
			PricePerHour: policy.Money{Micros: int64(200_000 + rng.IntN(40)*100_000), Currency: currency},
			Availability: []policy.Availability{policy.Available, policy.Scarce, policy.AvailabilityUnknown, policy.Unavailable}[rng.IntN(4)],
		}
		if rng.IntN(4) > 0 {
			e := policy.Money{Micros: int64(rng.IntN(100)) * 1000, Currency: currency}
			o.EgressPerGB = &e
		}
		if tier == policy.TierSpot && rng.IntN(2) == 0 {
			r := rng.Float64() / 5
			o.PreemptionRate = &r
		}
		offers[i] = o
	}
	rules := policy.Rules{
		ExchangeRates:    map[string]float64{"USD": 0.92},
		ResidencyClasses: map[string][]string{"NORDICS": {"SE", "FI", "NO", "DK", "IS"}},
	}
	for i := range nRules {
		r := policy.Rule{Name: fmt.Sprintf("rule-%d", i), Project: fmt.Sprintf("team-%d-*", i)}
		switch i % 3 {
		case 0:
			r.Residency = "EEA"
		case 1:
			r.DenyProviders = []string{fmt.Sprintf("p%d", i%20)}
		case 2:
			r.Labels = map[string]string{"data": "personal"}
			r.Residency = "EU"
		}
		if i%10 == 0 {
			r.Project = "research-*"
		}
		rules.Rules = append(rules.Rules, r)
	}
	rules.Budgets = []policy.Budget{{Project: "research-*", Period: "month", Cap: policy.Money{Micros: 5_000_000_000, Currency: "EUR"}, Spent: policy.Money{Micros: 4_900_000_000, Currency: "EUR"}}}
	limit := policy.Money{Micros: 3_000_000, Currency: "EUR"}
	job := policy.Requirements{
		Project: "research-vision", Labels: map[string]string{"data": "personal"},
		GPUCount: 2, Cards: []string{"H100", "A100-80GB", "H200"}, MinGPUMemoryGB: 80, VCPU: 16, MemoryGB: 128,
		Tier: policy.TierSpotThenOnDemand, MaxPricePerHour: &limit, ExpectedDuration: 6 * time.Hour,
		Inputs: []policy.Input{{Name: "frames", Region: "DE-1", Bytes: 500_000_000_000}},
	}
	return job, offers, rules
}

// BenchmarkPlace is one decision from the raw offers, preparing them
// included.
func BenchmarkPlace(b *testing.B) {
	job, offers, rules := benchWorld(10_000, 50)
	now := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	if _, err := policy.Place(job, offers, rules, now); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := policy.Place(job, offers, rules, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlaceOfferSet is a decision among offers prepared once, as the
// queue's placer keeps them between offer refreshes.
func BenchmarkPlaceOfferSet(b *testing.B) {
	job, offers, rules := benchWorld(10_000, 50)
	now := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	set := policy.NewOfferSet(offers)
	if _, err := set.Place(job, rules, now); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := set.Place(job, rules, now); err != nil {
			b.Fatal(err)
		}
	}
}
