package policy

import (
	"math/bits"
	"time"
)

// Compact is the short form of a decision, for storing with every
// placement: the chosen offer, the ranked plan B, and the rejections
// counted by reason with a few examples each. Among ten thousand offers
// the full decision is megabytes of JSON, nearly all of it rejected offers
// repeating a few reasons; the compact form is a few kilobytes. Placement
// is a pure function of the job, the offers and the rules, so the full
// list is recomputed on demand by placing again with the same inputs.
//
// Its JSON shares the decision's names only where the meaning is the same
// (version, chosen, alternatives, residency, …), so a stored compact form
// reads back as a Decision without its rejections, as Replace needs of a
// previous decision.
type Compact struct {
	Version   int        `json:"version"`
	DecidedAt time.Time  `json:"decided_at"`
	Currency  string     `json:"currency"`
	Chosen    *Candidate `json:"chosen,omitempty"`
	// Alternatives are the first of the decision's alternatives.
	Alternatives []Candidate `json:"alternatives"`
	Feasible     int         `json:"feasible"`
	// Offers is the number of offers the decision was made among;
	// Rejected how many of them were rejected.
	Offers   int `json:"offer_count"`
	Rejected int `json:"rejected_count"`
	// Reasons counts the rejected offers by reason code, in the order the
	// checks run; an offer rejected for several reasons counts under each.
	Reasons   []ReasonTally     `json:"rejections,omitempty"`
	Residency ResidencyDecision `json:"residency"`
	Notes     []string          `json:"notes,omitempty"`
}

// ReasonTally is how many offers one reason code rejected, with the first
// few of them in input order.
type ReasonTally struct {
	Code     ReasonCode        `json:"code"`
	Offers   int               `json:"offers"`
	Examples []RejectedExample `json:"examples"`
}

// RejectedExample is one rejected offer and the reason of its tally,
// worded.
type RejectedExample struct {
	// Offer is the offer's index among the decision's offers.
	Offer    int    `json:"offer"`
	Pool     string `json:"pool"`
	Provider string `json:"provider"`
	Region   string `json:"region"`
	Message  string `json:"message"`
}

// Compact returns the decision's short form with at most alternatives
// entries of plan B and examples rejected offers per reason code. Only the
// examples' reasons are worded, so compacting a fresh decision costs a few
// microseconds whatever the number of offers.
func (d *Decision) Compact(alternatives, examples int) Compact {
	c := Compact{
		Version: d.Version, DecidedAt: d.DecidedAt, Currency: d.Currency, Chosen: d.Chosen,
		Alternatives: d.Alternatives[:min(max(alternatives, 0), len(d.Alternatives))], Feasible: d.Feasible,
		Offers: len(d.Offers), Rejected: d.RejectedCount(), Residency: d.Residency, Notes: d.Notes,
	}
	if c.Alternatives == nil {
		c.Alternatives = []Candidate{}
	}
	r := d.rejections
	if r == nil {
		return c
	}
	var counts [len(reasonCodes)]int
	var picked [len(reasonCodes)][]int // positions in fails
	fails := r.fails()
	for k, x := range fails {
		for f := x.fail; f != 0; f &= f - 1 {
			code := bits.TrailingZeros32(f)
			counts[code]++
			if len(picked[code]) < examples {
				picked[code] = append(picked[code], k)
			}
		}
	}
	for code, n := range counts {
		if n == 0 {
			continue
		}
		t := ReasonTally{Code: reasonCodes[code], Offers: n, Examples: make([]RejectedExample, 0, len(picked[code]))}
		for _, k := range picked[code] {
			i := int(fails[k].offer)
			o := &d.Offers[i]
			t.Examples = append(t.Examples, RejectedExample{
				Offer: i, Pool: o.Pool, Provider: o.Provider, Region: o.Region, Message: r.message(k, code),
			})
		}
		c.Reasons = append(c.Reasons, t)
	}
	return c
}

// message words the reason with code position code of the k-th rejected
// offer, wording that offer's reasons alone when the rest are not worded.
func (r *rejections) message(k, code int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var why []int32
	var reasons []Reason
	if r.p != nil {
		x := r.list[k]
		why, reasons = r.p.explainOffer(int(x.offer), x.fail, nil), r.p.reasons.list
	} else {
		why, reasons = r.worded[k].Reasons, r.reasons
	}
	for _, i := range why {
		if int(i) < len(reasons) && reasons[i].Code == reasonCodes[code] {
			return reasons[i].Message
		}
	}
	return string(reasonCodes[code])
}
