package policy_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpuq/gpuq/policy"
)

func eur(s string) policy.Money {
	m, err := policy.ParseMoney(s + " EUR")
	if err != nil {
		panic(err)
	}
	return m
}

func ExamplePlace() {
	rules := policy.Rules{
		ExchangeRates: map[string]float64{"USD": 0.92},
		Rules: []policy.Rule{
			{Name: "personal-data", Labels: map[string]string{"data": "personal"}, Residency: "EU"},
		},
		// Moving data out of Hetzner's fsn1 costs 0.01 EUR/GB, whoever receives it.
		EgressPrices: []policy.EgressPrice{{Provider: "hetzner", Region: "fsn*", PerGB: eur("0.01")}},
	}
	limit := eur("2.50")
	job := policy.Requirements{
		Project:          "imaging",
		Labels:           map[string]string{"data": "personal"},
		GPUCount:         1,
		Cards:            []string{"H100", "A100-80GB"},
		MinGPUMemoryGB:   80,
		Tier:             policy.TierSpotThenOnDemand,
		MaxPricePerHour:  &limit,
		ExpectedDuration: 4 * time.Hour,
		Inputs:           []policy.Input{{Name: "scans", Provider: "hetzner", Region: "fsn1", Bytes: 200_000_000_000}},
	}
	egress := eur("0.01")
	rate := 0.05
	offers := []policy.Offer{
		{Provider: "aws", Pool: "aws-use1-h100", Region: "us-east-1", Country: "US", Card: "H100", GPUCount: 1, GPUMemoryGB: 80, Tier: policy.TierOnDemand, PricePerHour: policy.Money{Micros: 2_000_000, Currency: "USD"}, Availability: policy.Available},
		{Provider: "hetzner", Pool: "hz-fsn-a100", Region: "fsn1", Country: "DE", Card: "A100-80GB", GPUCount: 1, GPUMemoryGB: 80, Tier: policy.TierOnDemand, PricePerHour: eur("1.90"), Availability: policy.Available},
		{Provider: "scaleway", Pool: "scw-par-h100-spot", Region: "fr-par-2", Country: "FR", Card: "H100", GPUCount: 1, GPUMemoryGB: 80, Tier: policy.TierSpot, PricePerHour: eur("1.50"), Availability: policy.Scarce, PreemptionRate: &rate, EgressPerGB: &egress},
		{Provider: "scaleway", Pool: "scw-par-h100", Region: "fr-par-2", Country: "FR", Card: "H100", GPUCount: 1, GPUMemoryGB: 80, Tier: policy.TierOnDemand, PricePerHour: eur("3.10"), Availability: policy.Available},
		{Provider: "ovh", Pool: "ovh-gra-l4", Region: "gra", Country: "FR", Card: "L4", GPUCount: 1, GPUMemoryGB: 24, Tier: policy.TierOnDemand, PricePerHour: eur("0.80"), Availability: policy.Available},
	}
	now := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	d, err := policy.Place(job, offers, rules, now)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("residency %s imposed by %v\n", d.Residency.Class, d.Residency.ImposedBy)
	c := d.Chosen.Cost
	fmt.Printf("chosen %s: total %s = compute %s + spot overhead %s + egress %s\n",
		d.Chosen.Offer.Pool, c.Total, c.Compute, c.SpotOverhead, c.Egress)
	for _, a := range d.Alternatives {
		fmt.Printf("plan B %d: %s %s\n", a.Rank, a.Offer.Pool, a.Cost.Total)
	}
	for _, r := range d.Rejected() {
		for _, reason := range d.ReasonsOf(r) {
			fmt.Printf("rejected %s: %s\n", d.Offers[r.Offer].Pool, reason.Message)
		}
	}

	job.Cards = []string{"L4"}
	job.MinGPUMemoryGB = 0
	job.Residency = "CH"
	_, err = policy.Place(job, offers, rules, now)
	var refusal *policy.NoPlacementError
	if errors.As(err, &refusal) {
		fmt.Println(err)
	}
	// Output:
	// residency EU imposed by [rule personal-data]
	// chosen hz-fsn-a100: total 7.60 EUR = compute 7.60 EUR + spot overhead 0.00 EUR + egress 0.00 EUR
	// plan B 2: scw-par-h100-spot 8.05 EUR
	// rejected aws-use1-h100: region us-east-1 (US) outside residency EU required by rule personal-data
	// rejected scw-par-h100: price 3.10 EUR/h over cap 2.50 EUR/h
	// rejected ovh-gra-l4: card L4 (24 GB) not accepted (H100, A100-80GB)
	// rejected ovh-gra-l4: card L4 has 24 GB, job needs 80 GB
	// no placement among 5 offers: 5 offers outside residency EU∩CH (EU and CH share no country); 4 with cards other than L4; 1 over the price cap 2.50 EUR/h; relaxing residency EU∩CH (rule personal-data, job; EU and CH share no country) would make 1 offer feasible
}
