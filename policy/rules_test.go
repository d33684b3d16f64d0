package policy_test

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/policy"
)

func TestRulesValidateNamesTheKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		rules func(*policy.Rules)
		want  string
	}{
		{"rule names an undefined class", func(r *policy.Rules) { r.Rules[0].Residency = "EUU" }, `rules[0].residency: undefined residency class "EUU"`},
		{"budget in an unknown currency", func(r *policy.Rules) { r.Budgets[0].Cap = money("10 GBP") }, `budgets[0].cap: unknown currency "GBP"`},
		{"malformed project glob", func(r *policy.Rules) { r.Rules[1].Project = "team-[" }, `rules[1].project: malformed glob "team-["`},
		{"malformed provider glob", func(r *policy.Rules) { r.Rules[1].DenyProviders = []string{"a", "[x"} }, `rules[1].deny_providers[1]: malformed glob "[x"`},
		{"malformed label glob", func(r *policy.Rules) { r.Rules[0].Labels["data"] = "[" }, `rules[0].labels.data: malformed glob "["`},
		{"rule without a name", func(r *policy.Rules) { r.Rules[0].Name = "" }, `rules[0].name: must be set`},
		{"unknown budget period", func(r *policy.Rules) { r.Budgets[0].Period = "fortnight" }, `budgets[0].period: must be one of day, week, month, quarter, year, total, got "fortnight"`},
		{"bad base currency", func(r *policy.Rules) { r.BaseCurrency = "euro" }, `base_currency: "euro" is not an ISO 4217 currency code`},
		{"bad exchange rate", func(r *policy.Rules) { r.ExchangeRates["USD"] = 0 }, `exchange_rates.USD: must be a positive number, got 0`},
		{"class with a bad country", func(r *policy.Rules) { r.ResidencyClasses = map[string][]string{"dach": {"DE", "Austria"}} },
			`residency_classes.dach[1]: "Austria" is neither an ISO 3166-1 alpha-2 country code nor a residency class`},
		{"class redefining a built-in", func(r *policy.Rules) { r.ResidencyClasses = map[string][]string{"eu": {"DE"}} }, `residency_classes.eu: redefines the built-in class EU`},
		{"class referring to itself", func(r *policy.Rules) { r.ResidencyClasses = map[string][]string{"loop": {"DE", "LOOP"}} }, `residency_classes.loop[1]`},
		{"negative restart overhead", func(r *policy.Rules) { r.Spot.RestartOverhead = -1 }, `spot.restart_overhead: must not be negative`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := baseRules()
			tt.rules(&r)
			err := r.Validate()
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want prefix %q", err, tt.want)
			}
		})
	}
	if err := baseRules().Validate(); err != nil {
		t.Errorf("base rules: %v", err)
	}
}

func TestResidencyClasses(t *testing.T) {
	t.Parallel()
	rules := policy.Rules{ResidencyClasses: map[string][]string{"EuPlusCH": {"EU", "CH"}, "dach": {"DE", "AT", "CH"}}}
	tests := []struct {
		class, country string
		in             bool
	}{
		{"EU", "DE", true}, {"EU", "GR", true}, {"EU", "EL", true}, {"EU", "NO", false}, {"EU", "CH", false},
		{"EU", "GB", false}, {"EU", "", false}, {"EU", "de", false},
		{"EEA", "NO", true}, {"EEA", "IS", true}, {"EEA", "LI", true}, {"EEA", "CH", false},
		{"CH", "CH", true}, {"UK", "GB", true}, {"UK", "UK", true}, {"UK", "IE", false},
		{"euplusch", "CH", true}, {"euplusch", "FI", true}, {"EUPLUSCH", "NO", false},
		{"DACH", "AT", true}, {"dach", "FR", false},
	}
	for _, tt := range tests {
		c, ok := policy.Residency(rules, tt.class)
		if !ok {
			t.Fatalf("class %s not found", tt.class)
		}
		if got := c.Contains(tt.country); got != tt.in {
			t.Errorf("%s.Contains(%q) = %v, want %v", tt.class, tt.country, got, tt.in)
		}
	}
	if eu, _ := policy.Residency(rules, "EU"); len(eu.Countries()) != 27 {
		t.Errorf("EU has %d countries, want 27", len(eu.Countries()))
	}
	if _, ok := policy.Residency(rules, "EUU"); ok {
		t.Error("undefined class found")
	}
}

func TestMoneyParsesAndFormats(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want policy.Money
		out  string
	}{
		{"2.50 EUR", policy.Money{Micros: 2_500_000, Currency: "EUR"}, "2.50 EUR"},
		{"3 USD", policy.Money{Micros: 3_000_000, Currency: "USD"}, "3.00 USD"},
		{"0.000123 CHF", policy.Money{Micros: 123, Currency: "CHF"}, "0.000123 CHF"},
		{" .5 EUR ", policy.Money{Micros: 500_000, Currency: "EUR"}, "0.50 EUR"},
		{"9223372036854.775807 EUR", policy.Money{Micros: math.MaxInt64, Currency: "EUR"}, "9223372036854.775807 EUR"},
	}
	for _, tt := range tests {
		got, err := policy.ParseMoney(tt.in)
		if err != nil || !reflect.DeepEqual(got, tt.want) || got.String() != tt.out {
			t.Errorf("ParseMoney(%q) = %+v (%s), %v; want %+v (%s)", tt.in, got, got, err, tt.want, tt.out)
		}
	}
	for _, bad := range []string{"", "2.50", "2.50 eur", "-1 EUR", "1.0000001 EUR", "abc EUR", "99999999999999 EUR", "9223372036854.775808 EUR", "9223372036854.999999 EUR"} {
		if _, err := policy.ParseMoney(bad); err == nil {
			t.Errorf("ParseMoney(%q) succeeded", bad)
		}
	}
}

func TestValidPool(t *testing.T) {
	t.Parallel()
	for pool, want := range map[string]bool{"eu-h100_spot": true, "A1": true, "": false, "a.b": false, "a b": false, "a*": false, "a>": false} {
		if got := policy.ValidPool(pool); got != want {
			t.Errorf("ValidPool(%q) = %v, want %v", pool, got, want)
		}
	}
}
