package policy_test

import (
	"testing"

	"github.com/gpuq/gpuq/policy"
)

// FuzzParseMoney checks that whatever ParseMoney accepts is a non-negative
// amount that prints and parses back to itself. Seeds: testdata/fuzz.
func FuzzParseMoney(f *testing.F) {
	for _, s := range []string{"2.50 EUR", "0.000001 USD", "9223372036854.775807 EUR", "9223372036854.775808 EUR", ".5 CHF", "1e3 EUR"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := policy.ParseMoney(s)
		if err != nil {
			return
		}
		if m.Micros < 0 {
			t.Fatalf("ParseMoney(%q) = %d micros, negative", s, m.Micros)
		}
		back, err := policy.ParseMoney(m.String())
		if err != nil || back != m {
			t.Fatalf("ParseMoney(%q) = %+v prints as %q, which parses to %+v, %v", s, m, m.String(), back, err)
		}
	})
}
