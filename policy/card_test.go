package policy_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/policy"
	"pgregory.net/rapid"
)

func TestCardMatchesFamiliesSizesCaseAndVendor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, requirement string
		want              bool
	}{
		{"NVIDIA H100 80GB HBM3", "H100", true},
		{"H100", "h100", true},
		{"h100-sxm", "H100", true},
		{"NVIDIA H100 80GB HBM3", "nvidia h100", true},
		{"NVIDIA H100 80GB HBM3", "H100 80 GB", true},
		{"NVIDIA H100 80GB HBM3", "H100-SXM", false},
		{"A100-SXM4-80GB", "A100", true},
		{"A100-SXM4-40GB", "A100", true},
		{"A100-SXM4-80GB", "A100-80GB", true},
		{"A100-PCIE-40GB", "A100-80GB", false},
		{"A100-40GB", "a100-40g", true},
		{"L40S", "L40", false},
		{"L40", "L40S", false},
		{"NVIDIA RTX A1000", "A100", false},
		{"NVIDIA GeForce RTX 4090", "RTX4090", true},
		{"Tesla T4", "T4", true},
		{"T4", "", false},
		{"T4", "--", false},
	}
	for _, tt := range tests {
		if got := policy.CardMatches(tt.name, tt.requirement); got != tt.want {
			t.Errorf("CardMatches(%q, %q) = %v, want %v", tt.name, tt.requirement, got, tt.want)
		}
	}
}

func TestCheckCardRefusesUnknownCardsListingTheFamilies(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"H100", "h100", "A100-80GB", "NVIDIA A100-SXM4-40GB", "RTX 4090", "L40S", "mi300x"} {
		if err := policy.CheckCard(ok); err != nil {
			t.Errorf("CheckCard(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"X100", "cpu", "A1000", "80GB", ""} {
		err := policy.CheckCard(bad)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("unknown card %q; known families: ", bad)) ||
			!strings.Contains(err.Error(), "A100, A10G,") {
			t.Errorf("CheckCard(%q) = %v, want an error listing the families", bad, err)
		}
	}
}

// A family's name matches exactly the cards of that family, in every size,
// case and vendor spelling, and a family with a size matches exactly that
// size.
func TestFamilyMatchesExactlySizesOfThatFamilyProperty(t *testing.T) {
	t.Parallel()
	families := policy.CardFamilies()
	rapid.Check(t, func(t *rapid.T) {
		family := rapid.SampledFrom(families).Draw(t, "family")
		other := rapid.SampledFrom(families).Draw(t, "other")
		size := rapid.IntRange(1, 192).Draw(t, "size")
		want := rapid.IntRange(1, 192).Draw(t, "want")
		prefix := rapid.SampledFrom([]string{"", "NVIDIA ", "nvidia-", "AMD Instinct "}).Draw(t, "vendor")
		variant := rapid.SampledFrom([]string{"", "-SXM5", " PCIe", "_NVL"}).Draw(t, "variant")
		spell := rapid.SampledFrom([]func(string) string{strings.ToUpper, strings.ToLower}).Draw(t, "case")
		card := spell(prefix + other + variant + fmt.Sprintf("-%dGB", size))

		sameFamily := family == other
		if got := policy.CardMatches(card, family); got != sameFamily {
			t.Fatalf("CardMatches(%q, %q) = %v, want %v", card, family, got, sameFamily)
		}
		sized := fmt.Sprintf("%s-%dGB", family, want)
		if got := policy.CardMatches(card, sized); got != (sameFamily && size == want) {
			t.Fatalf("CardMatches(%q, %q) = %v, want %v", card, sized, got, sameFamily && size == want)
		}
		// An offer that states its size apart from the card's name
		// matches the same way.
		offer := policy.Offer{Provider: "p", Pool: "p1", Region: "r", Card: spell(prefix + other), GPUCount: 1, GPUMemoryGB: size,
			Tier: policy.TierOnDemand, PricePerHour: money("1 EUR"), Availability: policy.Available}
		job := policy.Requirements{GPUCount: 1, Cards: []string{sized}}
		d, _ := policy.Place(job, []policy.Offer{offer}, policy.Rules{}, now)
		if (d.Chosen != nil) != (sameFamily && size == want) {
			t.Fatalf("job for %s placed on %s with %d GB: %v", sized, offer.Card, size, d.Chosen != nil)
		}
	})
}
