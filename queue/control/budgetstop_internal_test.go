package control

import (
	"testing"

	"github.com/gpuq/gpuq/policy"
)

// A stop's reason shows what was spent to the cent, unless that would
// show less than the cap it reached.
func TestAStopsReasonNeverShowsLessSpentThanTheCapReached(t *testing.T) {
	for _, c := range []struct {
		spent, cap int64
		want       string
	}{
		{5_123_456, 5_000_000, "5.12 EUR"},
		{4_996_000, 4_995_000, "5.00 EUR"},
		{1_004_999, 1_004_000, "1.004999 EUR"}, // 1.00 EUR would be under the cap
		{1_056, 1_000, "0.001056 EUR"},         // a cap under a cent
	} {
		if got := reached(policy.Money{Micros: c.spent, Currency: "EUR"}, c.cap).String(); got != c.want {
			t.Errorf("spent %d micros against a cap of %d: %s, want %s", c.spent, c.cap, got, c.want)
		}
	}
}
