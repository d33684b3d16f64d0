package policy

import (
	"fmt"
	"slices"
	"time"
)

// EventKind is something that happened to a job in a pool.
type EventKind string

const (
	// EventPreempted: the provider took the capacity back while the job ran.
	EventPreempted EventKind = "preempted"
	// EventNoCapacity: the provider could not launch capacity in the pool.
	EventNoCapacity EventKind = "no_capacity"
)

// Event is one preemption or capacity failure of a job in a pool.
type Event struct {
	Pool string    `json:"pool"`
	Kind EventKind `json:"kind"`
	At   time.Time `json:"at"`
}

// History is what happened to a job so far, in any order.
type History struct {
	Events []Event `json:"events"`
}

// Replace decides the job's next placement after previous. It avoids pools
// that preempted the job or had no capacity within Rules.Replacement.AvoidFor,
// stops offering spot to a spot-then-on-demand job after EscalateAfter
// preemptions within Window, and never leaves previous's residency, however
// the rules have changed since: the new residency is the intersection of the
// old one with what the job and the rules require now. Budgets and price caps
// apply as in Place.
func Replace(job Requirements, offers []Offer, rules Rules, previous Decision, history History, now time.Time) (Decision, error) {
	return NewOfferSet(offers).Replace(job, rules, previous, history, now)
}

// Replace decides the job's next placement among the set's offers, as
// Replace does.
func (s *OfferSet) Replace(job Requirements, rules Rules, previous Decision, history History, now time.Time) (Decision, error) {
	p, err := s.placer(job, rules, now)
	if err != nil {
		return Decision{}, err
	}
	c := p.rules
	p.keepResidency(previous)
	var notes []string
	avoidFor := c.Replacement.AvoidFor
	events := slices.Clone(history.Events)
	slices.SortStableFunc(events, func(a, b Event) int { return a.At.Compare(b.At) })
	preemptions := 0
	for _, e := range events {
		if e.At.After(now) {
			continue
		}
		if e.Kind == EventPreempted && now.Sub(e.At) < c.Replacement.Window {
			preemptions++
		}
		if now.Sub(e.At) >= avoidFor {
			continue
		}
		what := "preempted the job"
		if e.Kind == EventNoCapacity {
			what = "had no capacity"
		}
		p.avoidPool(e.Pool, fmt.Sprintf("pool %s %s at %s; avoided until %s", e.Pool, what,
			e.At.UTC().Format(time.RFC3339), e.At.Add(avoidFor).UTC().Format(time.RFC3339)))
	}
	if job.tier() == TierSpotThenOnDemand && preemptions >= c.Replacement.EscalateAfter {
		p.escalate = fmt.Sprintf("spot: escalated to on-demand after %d preemptions within %s", preemptions, c.Replacement.Window)
		notes = append(notes, p.escalate)
	}
	d, err := p.place(previous.Version + 1)
	if previous.Chosen != nil && d.Chosen != nil && previous.Chosen.Offer.Pool != d.Chosen.Offer.Pool {
		notes = append(notes, "moved from pool "+previous.Chosen.Offer.Pool+" to pool "+d.Chosen.Offer.Pool)
	}
	d.Notes = append(notes, d.Notes...)
	if np, ok := err.(*NoPlacementError); ok {
		np.Decision = d
	}
	return d, err
}

// keepResidency narrows the placer's residency to previous's.
func (p *placer) keepResidency(previous Decision) {
	if !previous.Residency.Restricted() {
		return
	}
	prev := setOf(previous.Residency.Countries...)
	if p.restricted && p.allowed.subsetOf(prev) {
		return
	}
	names := []string{}
	if p.restricted {
		names = append(names, p.residency.Class)
		p.allowed = p.allowed.and(prev)
	} else {
		p.allowed, p.restricted = prev, true
	}
	names = append(names, previous.Residency.Class)
	p.residency.ImposedBy = append(p.residency.ImposedBy, fmt.Sprintf("placement v%d", previous.Version))
	p.setResidencyNames(names)
}

// avoidPool rejects pool for why; a later event replaces an earlier one's
// reason.
func (p *placer) avoidPool(pool, why string) {
	if p.avoid == nil {
		p.avoid = map[string]int32{}
	}
	if k, ok := p.avoid[pool]; ok {
		p.avoidWhy[k] = why
		return
	}
	p.avoid[pool] = int32(len(p.avoidWhy))
	p.avoidWhy = append(p.avoidWhy, why)
}
