package adapters

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpuq/gpuq/policy"
)

// ParsePrice reads a provider's decimal amount ("0.0123", "1.5", "2") in
// currency into integer micros, rounding half up beyond six decimals.
// Providers send prices as strings or JSON numbers; pass a number's literal
// text (json.Number), never a float64, so no binary rounding creeps in.
func ParsePrice(amount, currency string) (policy.Money, error) {
	amount = strings.TrimSpace(amount)
	if amount == "" {
		return policy.Money{}, fmt.Errorf("empty price")
	}
	whole, frac, _ := strings.Cut(amount, ".")
	if whole == "" {
		whole = "0"
	}
	if !digits(whole) || (frac != "" && !digits(frac)) {
		return policy.Money{}, fmt.Errorf("price %q is not a non-negative decimal number", amount)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > math.MaxInt64/1_000_000-1 {
		return policy.Money{}, fmt.Errorf("price %q is too large", amount)
	}
	roundUp := false
	if len(frac) > 6 {
		roundUp = frac[6] >= '5'
		frac = frac[:6]
	}
	f, _ := strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	micros := w*1_000_000 + f
	if roundUp {
		micros++
	}
	m := policy.Money{Micros: micros, Currency: currency}
	// Validate the currency the way offers are validated.
	if err := (policy.Offer{Provider: "p", Pool: "p", Tier: policy.TierOnDemand, PricePerHour: m}).Validate(); err != nil {
		return policy.Money{}, fmt.Errorf("currency %q: want an ISO 4217 code such as EUR", currency)
	}
	return m, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
