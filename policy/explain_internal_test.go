package policy

import (
	"math"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestExplainByAttrMatchesKeysProperty checks that finding reasons by the
// offers' attribute ids gives the same reasons as building their keys,
// both when an attribute is first seen and when it is found again.
func TestExplainByAttrMatchesKeysProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		offers := make([]Offer, rapid.IntRange(1, 40).Draw(t, "offers"))
		for i := range offers {
			count := rapid.SampledFrom([]int{1, 2, 8, 300, math.MaxInt32 + 1}).Draw(t, "count")
			offers[i] = Offer{
				Provider: rapid.SampledFrom([]string{"aws", "gcp", "cheapgpu"}).Draw(t, "provider"),
				Pool:     rapid.SampledFrom([]string{"a", "b", "c", "d"}).Draw(t, "pool"),
				Region:   rapid.SampledFrom([]string{"r1", "r2"}).Draw(t, "region"),
				Country:  rapid.SampledFrom([]string{"DE", "US", "FR", ""}).Draw(t, "country"),
				Card:     rapid.SampledFrom([]string{"H100", "L4"}).Draw(t, "card"),
				GPUCount: count, GPUMemoryGB: rapid.SampledFrom([]int{24, 80}).Draw(t, "gpu_mem"),
				VCPU: count * 4, MemoryGB: count * 16,
				Tier:         rapid.SampledFrom([]Tier{TierSpot, TierOnDemand}).Draw(t, "tier"),
				PricePerHour: Money{Micros: rapid.Int64Range(0, 5_000_000).Draw(t, "price"), Currency: rapid.SampledFrom([]string{"EUR", "USD", "GBP"}).Draw(t, "currency")},
				Availability: rapid.SampledFrom([]Availability{Available, Unavailable}).Draw(t, "avail"),
			}
		}
		rules := Rules{ExchangeRates: map[string]float64{"USD": 0.9}, Rules: []Rule{{Name: "deny", Project: "*", DenyProviders: []string{"cheap*"}}}}
		job := Requirements{
			Project: "p", GPUCount: 4, Cards: []string{"H100"}, MinGPUMemoryGB: 100, VCPU: 16, MemoryGB: 64,
			Residency: "EU", Tier: rapid.SampledFrom([]Tier{TierSpot, TierOnDemand}).Draw(t, "job_tier"),
			Providers: []string{"aws", "cheapgpu"}, Regions: []string{"r1"},
			MaxPricePerHour: &Money{Micros: 2_000_000, Currency: "EUR"}, Budget: &Money{Micros: 5_000_000, Currency: "EUR"},
			ExpectedDuration: 3 * time.Hour,
		}
		if rapid.Bool().Draw(t, "deadline") {
			job.Deadline = testNow().Add(2 * time.Hour)
		}
		p, err := NewOfferSet(offers).placer(job, rules, testNow())
		if err != nil {
			t.Fatal(err)
		}
		p.prepareChecks()
		for round := range 2 {
			for i := range offers {
				f := &p.set.facts[i]
				var est estimate
				fail := p.check(i, f, &est)
				got := p.explain(i, f, fail, &est, nil)
				want := p.explainByKey(i, f, fail, &est, nil)
				if !slices.Equal(got, want) {
					t.Fatalf("round %d, offer %d: by attributes %v, by keys %v", round, i, got, want)
				}
			}
		}
	})
}

// testNow is the time the internal tests decide at.
func testNow() time.Time { return time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC) }

// TestValidAgreesWithValidateProperty checks the fast validity test that
// preparing a set uses against the one that words the error.
func TestValidAgreesWithValidateProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		o := Offer{
			Provider:     rapid.SampledFrom([]string{"", "aws"}).Draw(t, "provider"),
			Pool:         rapid.SampledFrom([]string{"", "a-1", "a.1"}).Draw(t, "pool"),
			Country:      rapid.SampledFrom([]string{"", "DE", "de", "Germany", "UK"}).Draw(t, "country"),
			Tier:         rapid.SampledFrom([]Tier{"", TierSpot, TierOnDemand, TierSpotThenOnDemand}).Draw(t, "tier"),
			PricePerHour: Money{Micros: rapid.Int64Range(-1, 1).Draw(t, "price"), Currency: rapid.SampledFrom([]string{"EUR", "eur", ""}).Draw(t, "currency")},
			GPUCount:     rapid.IntRange(-1, 1).Draw(t, "gpus"), VCPU: rapid.IntRange(-1, 1).Draw(t, "vcpu"),
			Availability: rapid.SampledFrom([]Availability{"", Available, Scarce, AvailabilityUnknown, Unavailable, "plenty"}).Draw(t, "avail"),
			MaxDuration:  time.Duration(rapid.IntRange(-1, 1).Draw(t, "max_duration")),
		}
		if rapid.Bool().Draw(t, "has_egress") {
			o.EgressPerGB = &Money{Micros: rapid.Int64Range(-1, 1).Draw(t, "egress"), Currency: rapid.SampledFrom([]string{"EUR", "x"}).Draw(t, "egress_currency")}
		}
		if rapid.Bool().Draw(t, "has_rate") {
			o.PreemptionRate = ptrTo(rapid.Float64Range(-1, 1).Draw(t, "rate"))
		}
		_, countryOK := countryIndex(o.Country)
		if got, want := o.valid(countryOK, o.Availability.rank()), o.validate() == nil; got != want {
			t.Fatalf("valid = %v, validate = %v for %+v", got, o.validate(), o)
		}
	})
}

func ptrTo[T any](v T) *T { return &v }
