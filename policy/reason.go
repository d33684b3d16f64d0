package policy

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// ReasonCode classifies why an offer was rejected.
type ReasonCode string

// The rejection reasons, in the order checks run.
const (
	ReasonInvalidOffer  ReasonCode = "invalid_offer"
	ReasonResidency     ReasonCode = "residency"
	ReasonProviderRule  ReasonCode = "provider_rule"
	ReasonProvider      ReasonCode = "provider"
	ReasonRegion        ReasonCode = "region"
	ReasonTier          ReasonCode = "tier"
	ReasonEscalated     ReasonCode = "escalated"
	ReasonAvoided       ReasonCode = "avoided"
	ReasonAvailability  ReasonCode = "availability"
	ReasonCard          ReasonCode = "card"
	ReasonGPUPool       ReasonCode = "gpu_pool"
	ReasonGPUCount      ReasonCode = "gpu_count"
	ReasonGPUMemory     ReasonCode = "gpu_memory"
	ReasonVCPU          ReasonCode = "vcpu"
	ReasonMemory        ReasonCode = "memory"
	ReasonCurrency      ReasonCode = "currency"
	ReasonPriceCap      ReasonCode = "price_cap"
	ReasonJobBudget     ReasonCode = "job_budget"
	ReasonProjectBudget ReasonCode = "project_budget"
	ReasonDeadline      ReasonCode = "deadline"
)

// reasonCodes lists the codes in the order checks run.
var reasonCodes = [...]ReasonCode{
	ReasonInvalidOffer, ReasonResidency, ReasonProviderRule, ReasonProvider, ReasonRegion,
	ReasonTier, ReasonEscalated, ReasonAvoided, ReasonAvailability, ReasonCard, ReasonGPUPool, ReasonGPUCount,
	ReasonGPUMemory, ReasonVCPU, ReasonMemory, ReasonCurrency, ReasonPriceCap, ReasonJobBudget,
	ReasonProjectBudget, ReasonDeadline,
}

// Reason is one reason an offer was rejected.
type Reason struct {
	Code    ReasonCode `json:"code"`
	Message string     `json:"message"`
}

// Rejection is an offer that cannot take the job. Offer is its index in
// the decision's Offers; Reasons are indexes into the decision's Reasons,
// where each distinct reason is worded once: thousands of offers outside a
// residency class share a handful of messages. Decision.ReasonsOf words
// them back.
type Rejection struct {
	Offer   int     `json:"offer"`
	Reasons []int32 `json:"reasons"`
}

// reasonKey identifies one distinct reason: its code and the offer's
// attributes the message depends on (a and b; their meaning is per code).
type reasonKey struct {
	code int
	a, b int64
}

// reasonTable words each distinct reason once and hands out its index.
// A decision looks a reason up for every reason of every rejected offer,
// tens of thousands of times, among a few hundred distinct keys: a small
// cache indexed by the key's hash answers almost all of them, and a map
// holds the rest.
type reasonTable struct {
	list  []Reason
	keys  []reasonKey
	cache [1 << reasonCacheBits]int32 // index+1 of a reason by hash of its key; 0 when empty
	byKey map[reasonKey]int32
}

const reasonCacheBits = 10

func (k reasonKey) slot() uint64 {
	h := uint64(k.a)*0x9e3779b97f4a7c15 ^ uint64(k.b)*0xc2b2ae3d27d4eb4f ^ uint64(k.code)*0x165667b19e3779f9
	return h >> (64 - reasonCacheBits)
}

// find returns the index of the reason with key k when the cache holds it,
// or -1; it is the fast path of index, small enough to inline.
func (t *reasonTable) find(k reasonKey) int32 {
	if i := t.cache[k.slot()] - 1; i >= 0 && t.keys[i] == k {
		return i
	}
	return -1
}

// index returns the index of the reason with key k, wording it with word
// the first time.
func (t *reasonTable) index(k reasonKey, word func() string) int32 {
	if i := t.find(k); i >= 0 {
		return i
	}
	i, ok := t.byKey[k]
	if !ok {
		i = int32(len(t.list))
		t.list = append(t.list, Reason{Code: reasonCodes[k.code], Message: word()})
		t.keys = append(t.keys, k)
		if t.byKey == nil {
			t.byKey = map[reasonKey]int32{}
		}
		t.byKey[k] = i
	}
	t.cache[k.slot()] = i + 1
	return i
}

// ReasonCount says how many offers a reason rejected.
type ReasonCount struct {
	Code ReasonCode `json:"code"`
	// Summary completes "N offers …", e.g. "outside residency EU".
	Summary string `json:"summary"`
	Offers  int    `json:"offers"`
}

// Relaxation names the constraint whose removal alone would make the most
// offers feasible.
type Relaxation struct {
	Code       ReasonCode `json:"code"`
	Constraint string     `json:"constraint"`
	Offers     int        `json:"offers"`
}

// NoPlacementError is Place's refusal when no offer is feasible. Its
// Decision still lists every rejected offer with its reasons.
type NoPlacementError struct {
	Offers     int           `json:"offers"`
	Counts     []ReasonCount `json:"counts"`
	Relaxation *Relaxation   `json:"relaxation,omitempty"`
	Decision   Decision      `json:"decision"`
}

func (e *NoPlacementError) Error() string {
	if e.Offers == 0 {
		return "no placement: there are no offers"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "no placement among %d %s: ", e.Offers, plural(e.Offers, "offer"))
	for i, c := range e.Counts {
		if i > 0 {
			b.WriteString("; ")
		}
		if i == 0 {
			fmt.Fprintf(&b, "%d %s %s", c.Offers, plural(c.Offers, "offer"), c.Summary)
		} else {
			fmt.Fprintf(&b, "%d %s", c.Offers, c.Summary)
		}
	}
	if r := e.Relaxation; r != nil {
		fmt.Fprintf(&b, "; relaxing %s would make %d %s feasible", r.Constraint, r.Offers, plural(r.Offers, "offer"))
	}
	return b.String()
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// refusal counts the reasons of the rejected offers and picks the
// relaxation: the reason that alone rejects the most offers.
func (p *placer) refusal(d Decision, rejected []rejectedOffer) *NoPlacementError {
	e := &NoPlacementError{Offers: len(rejected), Decision: d}
	var counts, alone [len(reasonCodes)]int
	for _, r := range rejected {
		fail := r.fail
		for f := fail; f != 0; f &= f - 1 {
			counts[bits.TrailingZeros32(f)]++
		}
		if bits.OnesCount32(fail) == 1 {
			alone[bits.TrailingZeros32(fail)]++
		}
	}
	for i, code := range reasonCodes {
		if n := counts[i]; n > 0 {
			e.Counts = append(e.Counts, ReasonCount{Code: code, Summary: p.summary(code), Offers: n})
		}
	}
	slices.SortStableFunc(e.Counts, func(a, b ReasonCount) int { return b.Offers - a.Offers })
	best := -1
	for i, code := range reasonCodes {
		if code != ReasonInvalidOffer && alone[i] > 0 && (best < 0 || alone[i] > alone[best]) {
			best = i
		}
	}
	if best >= 0 {
		code := reasonCodes[best]
		e.Relaxation = &Relaxation{Code: code, Constraint: p.constraint(code), Offers: alone[best]}
	}
	return e
}

// summary completes "N offers …" for a reason code.
func (p *placer) summary(code ReasonCode) string {
	j := p.job
	switch code {
	case ReasonInvalidOffer:
		return "malformed"
	case ReasonResidency:
		if d := p.disjointClasses(); d != "" {
			return "outside residency " + p.residency.Class + " (" + d + ")"
		}
		return "outside residency " + p.residency.Class
	case ReasonProviderRule:
		return "from providers the organisation's rules exclude"
	case ReasonProvider:
		return "from providers outside " + strings.Join(j.Providers, ", ")
	case ReasonRegion:
		return "in regions outside " + strings.Join(j.Regions, ", ")
	case ReasonTier:
		return "not " + string(j.tier())
	case ReasonEscalated:
		return "spot after escalation to on-demand"
	case ReasonAvoided:
		return "in pools that just failed the job"
	case ReasonAvailability:
		return "without capacity"
	case ReasonCard:
		return "with cards other than " + strings.Join(j.Cards, ", ")
	case ReasonGPUPool:
		return "in GPU pools kept for GPU jobs"
	case ReasonGPUCount:
		return fmt.Sprintf("with fewer than %d GPUs", j.GPUCount)
	case ReasonGPUMemory:
		return fmt.Sprintf("lack %d GB cards", j.MinGPUMemoryGB)
	case ReasonVCPU:
		return fmt.Sprintf("with fewer than %d vCPU", j.VCPU)
	case ReasonMemory:
		return fmt.Sprintf("with less than %d GB memory", j.MemoryGB)
	case ReasonCurrency:
		return "priced in currencies without an exchange rate"
	case ReasonPriceCap:
		return "over the price cap " + j.MaxPricePerHour.String() + "/h"
	case ReasonJobBudget:
		return "over the job budget " + j.Budget.String()
	case ReasonProjectBudget:
		return "over the project's remaining budget"
	case ReasonDeadline:
		return "too slow for the deadline"
	}
	return string(code)
}

// constraint names what a user or administrator would change.
func (p *placer) constraint(code ReasonCode) string {
	switch code {
	case ReasonResidency:
		c := "residency " + p.residency.Class + " (" + strings.Join(p.residency.ImposedBy, ", ")
		if d := p.disjointClasses(); d != "" {
			c += "; " + d
		}
		return c + ")"
	case ReasonProviderRule:
		return "the provider rules"
	case ReasonProvider:
		return "placement.providers"
	case ReasonRegion:
		return "placement.regions"
	case ReasonTier:
		return "placement.tier"
	case ReasonEscalated:
		return "replacement.escalate_after"
	case ReasonAvoided:
		return "replacement.avoid_for"
	case ReasonAvailability:
		return "the wait for capacity"
	case ReasonCard:
		return "resources.gpu.cards"
	case ReasonGPUPool:
		return "placement.allow_gpu_for_cpu"
	case ReasonGPUCount:
		return "resources.gpu.count"
	case ReasonGPUMemory:
		return "resources.gpu.memory_gb"
	case ReasonVCPU:
		return "resources.cpu"
	case ReasonMemory:
		return "resources.memory_gb"
	case ReasonCurrency:
		return "exchange_rates"
	case ReasonPriceCap:
		return "budget.max_price_per_hour " + p.job.MaxPricePerHour.String()
	case ReasonJobBudget:
		return "budget.total " + p.job.Budget.String()
	case ReasonProjectBudget:
		return "the project budget " + p.projectBudget.Project
	case ReasonDeadline:
		return "deadline"
	}
	return string(code)
}

// disjointClasses says, when the classes the residency intersects share no
// country, which they are: "EEA and CH share no country". Otherwise "".
func (p *placer) disjointClasses() string {
	if !p.restricted || p.allowed != (countrySet{}) {
		return ""
	}
	names := strings.Split(p.residency.Class, "∩")
	if len(names) < 2 {
		return ""
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + " share no country"
}

// disjoint is the decision's note when its residency is empty.
func (p *placer) disjoint() string {
	d := p.disjointClasses()
	if d == "" {
		return ""
	}
	return "residency " + p.residency.Class + " required by " + strings.Join(p.residency.ImposedBy, " and ") + " is empty: " +
		d + ", so no offer can be inside it"
}
