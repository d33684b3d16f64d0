package policy

import (
	"fmt"
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
	ReasonTier, ReasonEscalated, ReasonAvoided, ReasonAvailability, ReasonCard, ReasonGPUCount,
	ReasonGPUMemory, ReasonVCPU, ReasonMemory, ReasonCurrency, ReasonPriceCap, ReasonJobBudget,
	ReasonProjectBudget, ReasonDeadline,
}

// Reason is one reason an offer was rejected.
type Reason struct {
	Code    ReasonCode `json:"code"`
	Message string     `json:"message"`
}

// Rejection is an offer that cannot take the job, with every reason.
type Rejection struct {
	Offer   Offer    `json:"offer"`
	Reasons []Reason `json:"reasons"`
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

// refusal counts the reasons of rejected and picks the relaxation.
func (p *placer) refusal(d Decision) *NoPlacementError {
	e := &NoPlacementError{Offers: len(d.Rejected), Decision: d}
	counts := map[ReasonCode]int{}
	alone := map[ReasonCode]int{}
	for _, r := range d.Rejected {
		seen := ReasonCode("")
		only := true
		for _, reason := range r.Reasons {
			if reason.Code != seen {
				counts[reason.Code]++
				if seen != "" {
					only = false
				}
				seen = reason.Code
			}
		}
		if only && seen != "" {
			alone[seen]++
		}
	}
	for _, code := range reasonCodes {
		if n := counts[code]; n > 0 {
			e.Counts = append(e.Counts, ReasonCount{Code: code, Summary: p.summary(code), Offers: n})
		}
	}
	slices.SortStableFunc(e.Counts, func(a, b ReasonCount) int { return b.Offers - a.Offers })
	best := ReasonCode("")
	for _, code := range reasonCodes {
		if alone[code] > alone[best] && code != ReasonInvalidOffer {
			best = code
		}
	}
	if best != "" {
		e.Relaxation = &Relaxation{Code: best, Constraint: p.constraint(best), Offers: alone[best]}
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
		return "residency " + p.residency.Class + " (" + strings.Join(p.residency.ImposedBy, ", ") + ")"
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
