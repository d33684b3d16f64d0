package cli

import (
	"testing"
)

// FuzzParseRules checks that a policy file is refused or accepted without
// panicking, and that accepted rules validate. Seeds: testdata/fuzz.
func FuzzParseRules(f *testing.F) {
	f.Add([]byte("rules:\n  - {name: eu, project: \"vision*\", residency: EU}\nbudgets:\n  - {project: a, period: month, cap: \"5 EUR\"}\n"))
	f.Add([]byte("x: &x [1]\ny: *x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rules, err := parseRules(data, "policy.yaml")
		if err != nil {
			return
		}
		if err := rules.Validate(); err != nil {
			t.Fatalf("accepted rules do not validate: %v", err)
		}
	})
}

// FuzzParseOffers checks that an offers file is refused or accepted without
// panicking, and that accepted offers pass the offer checks again.
func FuzzParseOffers(f *testing.F) {
	f.Add([]byte("offers:\n  - {pool: p, provider: local, region: fsn1, country: DE, card: H100, gpu_count: 1, price_per_hour: \"2.10 EUR\", tier: spot}\n"))
	f.Add([]byte("offers: [{pool: a}, {pool: a}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		offers, err := parseOffers(data, "offers.yaml")
		if err != nil {
			return
		}
		for i := range offers {
			if err := offers[i].Validate(); err != nil {
				t.Fatalf("accepted offer %d does not validate: %v", i, err)
			}
		}
	})
}
