package policy

import (
	"fmt"
	"strings"
	"time"
)

// Availability is a provider's statement about capacity in a pool.
type Availability string

const (
	Available           Availability = "available"
	Scarce              Availability = "scarce"
	Unavailable         Availability = "none"
	AvailabilityUnknown Availability = "unknown"
)

// rank orders availabilities for ranking: lower is better; 3 is none, and
// 4 is not an availability at all. The empty availability is unknown.
func (a Availability) rank() int {
	if a == "" {
		return 2
	}
	return int(availRanks[availabilities.find(string(a))+1])
}

// availabilities and availRanks rank an availability without branching on
// which one it is: offers mix them at random, and such a branch would
// mostly be mispredicted.
var (
	availabilities = newConstWords(string(Available), string(Scarce), string(AvailabilityUnknown), string(Unavailable))
	availRanks     = [...]uint8{4, 0, 1, 2, 3} // by index in availabilities+1
)

// offerTiers are the tiers an offer may have, found as availabilities are.
var offerTiers = newConstWords(string(TierOnDemand), string(TierSpot))

// Offer is what a provider says it can rent now in one pool.
type Offer struct {
	Provider string `json:"provider" yaml:"provider" mapstructure:"provider"`
	// Pool identifies the capacity (provider + region + card + tier). It
	// becomes a NATS subject token and consumer name, so it must match
	// ^[A-Za-z0-9_-]+$.
	Pool   string `json:"pool" yaml:"pool" mapstructure:"pool"`
	Region string `json:"region" yaml:"region" mapstructure:"region"`
	// Country is the ISO 3166-1 alpha-2 code of the region's location.
	Country     string `json:"country" yaml:"country" mapstructure:"country"`
	Card        string `json:"card" yaml:"card" mapstructure:"card"`
	GPUCount    int    `json:"gpu_count" yaml:"gpu_count" mapstructure:"gpu_count"`
	GPUMemoryGB int    `json:"gpu_memory_gb" yaml:"gpu_memory_gb" mapstructure:"gpu_memory_gb"`
	VCPU        int    `json:"vcpu" yaml:"vcpu" mapstructure:"vcpu"`
	MemoryGB    int    `json:"memory_gb" yaml:"memory_gb" mapstructure:"memory_gb"`
	// Tier is spot or on-demand.
	Tier         Tier  `json:"tier" yaml:"tier" mapstructure:"tier"`
	PricePerHour Money `json:"price_per_hour" yaml:"price_per_hour" mapstructure:"price_per_hour"`
	// EgressPerGB is nil when the provider does not say.
	EgressPerGB  *Money       `json:"egress_per_gb,omitempty" yaml:"egress_per_gb" mapstructure:"egress_per_gb"`
	Availability Availability `json:"availability,omitempty" yaml:"availability" mapstructure:"availability"`
	// PreemptionRate is the expected preemptions per hour of a spot
	// instance; nil when unknown.
	PreemptionRate *float64 `json:"preemption_rate,omitempty" yaml:"preemption_rate" mapstructure:"preemption_rate"`
	// MaxDuration is the longest an instance of the pool may run before
	// the provider ends it; zero when the provider sets no limit.
	MaxDuration time.Duration `json:"max_duration_ns,omitempty" yaml:"max_duration" mapstructure:"max_duration"`
}

// ValidPool reports whether pool can be used as a NATS subject token and
// consumer name: it must match ^[A-Za-z0-9_-]+$.
func ValidPool(pool string) bool {
	for i := 0; i < len(pool); i++ {
		if !poolBytes[pool[i]] {
			return false
		}
	}
	return pool != ""
}

// poolBytes marks the bytes a pool name may contain; placement checks every
// offer's pool, so this is a table rather than a chain of comparisons.
var poolBytes = func() (t [256]bool) {
	for c := range 256 {
		t[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
	}
	return t
}()

// Validate checks the offer's shape, naming the field at fault.
func (o Offer) Validate() error { return o.validate() }

// valid reports whether validate finds nothing wrong, given the offer's
// countryIndex and Availability.rank, which preparing a set needs anyway;
// it builds no error, so that a set of valid offers is prepared quickly.
// Offers state an egress price and a preemption rate or not at random, so
// a missing one is checked as a valid stand-in rather than branched on.
func (o *Offer) valid(countryOK bool, avail int) bool {
	egress, rate := orElse(o.EgressPerGB, &noEgress), orElse(o.PreemptionRate, &noRate)
	return o.Provider != "" && ValidPool(o.Pool) && offerTiers.find(string(o.Tier)) >= 0 &&
		o.PricePerHour.Micros >= 0 && validCurrency(o.PricePerHour.Currency) &&
		egress.Micros >= 0 && validCurrency(egress.Currency) &&
		*rate >= 0 && o.MaxDuration >= 0 &&
		min(o.GPUCount, o.GPUMemoryGB, o.VCPU, o.MemoryGB) >= 0 &&
		(o.Country == "" || countryOK) && avail < 4
}

// orElse returns p, or alt when p is nil. It picks one by index, as the
// compiler would not: offers state an egress price or a preemption rate at
// random, and a branch on that would mostly be mispredicted.
func orElse[T any](p, alt *T) *T {
	ptrs := [2]*T{alt, p}
	return ptrs[flag(p != nil, 1)]
}

// noEgress and noRate stand in for an offer's missing egress price and
// preemption rate; they are never written.
var (
	noEgress = Money{Currency: "XXX"} // ISO 4217's code for no currency
	noRate   float64
)

// validate is Validate without copying the offer, for the placement loop.
func (o *Offer) validate() error {
	switch {
	case o.Provider == "":
		return fmt.Errorf("provider: must be set")
	case !ValidPool(o.Pool):
		return fmt.Errorf("pool: %q must match ^[A-Za-z0-9_-]+$", o.Pool)
	case o.Tier != TierSpot && o.Tier != TierOnDemand:
		return fmt.Errorf("tier: must be spot or on-demand, got %q", o.Tier)
	case o.PricePerHour.Micros < 0 || !validCurrency(o.PricePerHour.Currency):
		return fmt.Errorf("price_per_hour: want a non-negative amount in an ISO 4217 currency, got %s", o.PricePerHour)
	case o.EgressPerGB != nil && (o.EgressPerGB.Micros < 0 || !validCurrency(o.EgressPerGB.Currency)):
		return fmt.Errorf("egress_per_gb: want a non-negative amount in an ISO 4217 currency, got %s", o.EgressPerGB)
	case o.PreemptionRate != nil && !(*o.PreemptionRate >= 0):
		return fmt.Errorf("preemption_rate: must be 0 or more, got %v", *o.PreemptionRate)
	case o.MaxDuration < 0:
		return fmt.Errorf("max_duration: must be 0 (no limit) or more, got %s", o.MaxDuration)
	case o.GPUCount < 0 || o.GPUMemoryGB < 0 || o.VCPU < 0 || o.MemoryGB < 0:
		return fmt.Errorf("gpu_count, gpu_memory_gb, vcpu, memory_gb: must be 0 or more")
	case o.Country != "" && !isCountryCode(o.Country):
		return fmt.Errorf("country: want an upper-case ISO 3166-1 alpha-2 code such as DE, got %q", o.Country)
	}
	if o.Availability.rank() == 4 {
		return fmt.Errorf("availability: must be available, scarce, none or unknown, got %q", o.Availability)
	}
	return nil
}

// HasGPU reports whether the offer is a GPU pool: it has GPUs, or names a
// card other than "cpu".
func (o *Offer) HasGPU() bool {
	return o.GPUCount > 0 || o.Card != "" && !strings.EqualFold(o.Card, "cpu")
}

// NormalizeCountry returns an ISO 3166-1 alpha-2 code in upper case ("de"
// → "DE"), or an error when code is not two letters. The empty code stays
// empty: it means the country is unknown.
func NormalizeCountry(code string) (string, error) {
	up := strings.ToUpper(strings.TrimSpace(code))
	if up != "" && !isCountryCode(up) {
		return code, fmt.Errorf("want an ISO 3166-1 alpha-2 code such as DE, got %q", code)
	}
	return up, nil
}

func isCountryCode(code string) bool {
	_, ok := countryIndex(code)
	return ok
}

// NormalizeOffers checks offers as one set, as they arrive from a file or
// from the providers, naming the entry at fault: `offers[3].country: …`.
// It upper-cases country codes in place, validates each offer, and refuses
// two offers with the same pool: a pool id names one NATS subject and one
// consumer, so two offers under it would send a job to either.
func NormalizeOffers(offers []Offer) error {
	seen := make(map[string]int, len(offers))
	for i := range offers {
		o := &offers[i]
		country, err := NormalizeCountry(o.Country)
		if err != nil {
			return fmt.Errorf("offers[%d].country: %w", i, err)
		}
		o.Country = country
		if err := o.validate(); err != nil {
			return fmt.Errorf("offers[%d].%w", i, err)
		}
		if j, dup := seen[o.Pool]; dup {
			return fmt.Errorf("offers[%d].pool and offers[%d].pool: both are %q (%s %s %s and %s %s %s); a pool id must name one pool",
				j, i, o.Pool, offers[j].Provider, offers[j].Region, orUnknown(offers[j].Country), o.Provider, o.Region, orUnknown(o.Country))
		}
		seen[o.Pool] = i
	}
	return nil
}

func orUnknown(country string) string {
	if country == "" {
		return "country unknown"
	}
	return country
}
