package policy

import (
	"bytes"
	"encoding/json"
	"math/bits"
	"sync"
	"time"
)

// rejectedOffer is a rejected offer as placement leaves it: its index and
// the mask of its failed checks, one bit per reason code. No pointers, so
// ten thousand of them are one small allocation the collector never scans.
type rejectedOffer struct {
	offer int32
	fail  uint32
}

// rejections are a decision's rejected offers. Placement records only
// masks; the reasons are worded by the placer that made the decision the
// first time someone asks (Rejected, Reasons, ReasonsOf, JSON), and words
// a few offers' reasons for Compact without wording the rest. A decision
// read from JSON has them worded already and no placer.
type rejections struct {
	list []rejectedOffer
	p    *placer // nil once worded

	mu      sync.Mutex
	worded  []Rejection
	reasons []Reason
}

// costBits are the checks whose messages quote the offer's estimate.
var costBits = bitPriceCap | bitJobBudget | bitProjectBudget | bitDeadline

// word returns every rejection with its reasons, wording them once.
func (r *rejections) word() ([]Rejection, []Reason) {
	if r == nil {
		return nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.p == nil {
		return r.worded, r.reasons
	}
	p := r.p
	r.worded = make([]Rejection, len(r.list))
	// One backing array holds every rejection's reasons.
	n := 0
	for _, x := range r.list {
		n += bits.OnesCount32(x.fail)
	}
	why := make([]int32, 0, n)
	for k, x := range r.list {
		from := len(why)
		why = p.explainOffer(int(x.offer), x.fail, why)
		r.worded[k] = Rejection{Offer: int(x.offer), Reasons: why[from:len(why):len(why)]}
	}
	r.reasons, r.p = p.reasons.list, nil
	return r.worded, r.reasons
}

// explainOffer appends the indexes of offer i's reasons for the checks in
// fail, pricing the offer again when a message quotes its estimate.
func (p *placer) explainOffer(i int, fail uint32, why []int32) []int32 {
	f := &p.set.facts[i]
	var est estimate
	if fail&costBits != 0 {
		p.estimate(f, &est)
	}
	return p.explain(i, f, fail, &est, why)
}

// Rejected lists every rejected offer in input order, each with the indexes
// of its reasons in Reasons, in the order the checks run.
func (d *Decision) Rejected() []Rejection {
	list, _ := d.rejections.word()
	return list
}

// Reasons holds every distinct rejection reason of the decision once.
func (d *Decision) Reasons() []Reason {
	_, reasons := d.rejections.word()
	return reasons
}

// RejectedCount is the number of rejected offers, found without wording
// their reasons.
func (d *Decision) RejectedCount() int {
	r := d.rejections
	if r == nil {
		return 0
	}
	if r.list == nil {
		return len(r.worded)
	}
	return len(r.list)
}

// ReasonsOf returns every reason r was rejected, worded, in the order the
// checks run.
func (d *Decision) ReasonsOf(r Rejection) []Reason {
	reasons := d.Reasons()
	out := make([]Reason, len(r.Reasons))
	for i, k := range r.Reasons {
		out[i] = reasons[k]
	}
	return out
}

// decisionJSON is Decision's JSON form, fields in the order they are
// written.
type decisionJSON struct {
	Version      int               `json:"version"`
	DecidedAt    time.Time         `json:"decided_at"`
	Currency     string            `json:"currency"`
	Chosen       *Candidate        `json:"chosen,omitempty"`
	Alternatives []Candidate       `json:"alternatives"`
	Feasible     int               `json:"feasible"`
	Offers       []Offer           `json:"offers"`
	Rejected     []Rejection       `json:"rejected"`
	Reasons      []Reason          `json:"reasons,omitempty"`
	Residency    ResidencyDecision `json:"residency"`
	Notes        []string          `json:"notes,omitempty"`
}

// MarshalJSON writes the decision with every rejection and its reasons.
func (d Decision) MarshalJSON() ([]byte, error) {
	list, reasons := d.rejections.word()
	if list == nil {
		list = []Rejection{}
	}
	return json.Marshal(decisionJSON{
		Version: d.Version, DecidedAt: d.DecidedAt, Currency: d.Currency, Chosen: d.Chosen,
		Alternatives: d.Alternatives, Feasible: d.Feasible, Offers: d.Offers, Rejected: list, Reasons: reasons,
		Residency: d.Residency, Notes: d.Notes,
	})
}

// UnmarshalJSON reads a decision MarshalJSON wrote.
func (d *Decision) UnmarshalJSON(b []byte) error {
	var j decisionJSON
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&j); err != nil {
		return err
	}
	*d = Decision{
		Version: j.Version, DecidedAt: j.DecidedAt, Currency: j.Currency, Chosen: j.Chosen,
		Alternatives: j.Alternatives, Feasible: j.Feasible, Offers: j.Offers, Residency: j.Residency, Notes: j.Notes,
		rejections: &rejections{worded: j.Rejected, reasons: j.Reasons},
	}
	return nil
}

// fails returns the failure mask of each rejected offer, from the masks
// placement recorded or, for a decision read from JSON, from its reasons'
// codes.
func (r *rejections) fails() []rejectedOffer {
	if r == nil {
		return nil
	}
	if r.list != nil {
		return r.list
	}
	out := make([]rejectedOffer, len(r.worded))
	for k, x := range r.worded {
		out[k].offer = int32(x.Offer)
		for _, i := range x.Reasons {
			if int(i) < len(r.reasons) {
				if c, ok := codeBit(r.reasons[i].Code); ok {
					out[k].fail |= c
				}
			}
		}
	}
	return out
}

// codeBit is the failure-mask bit of code.
func codeBit(code ReasonCode) (uint32, bool) {
	for i, c := range reasonCodes {
		if c == code {
			return 1 << i, true
		}
	}
	return 0, false
}
