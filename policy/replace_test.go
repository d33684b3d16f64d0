package policy_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/policy"
)

func spotWorld() (policy.Requirements, []policy.Offer) {
	job := baseJob()
	job.Tier = policy.TierSpotThenOnDemand
	mk := func(pool, region string, tier policy.Tier, price string) policy.Offer {
		o := baseOffer()
		o.Pool, o.Region, o.Tier, o.PricePerHour = pool, region, tier, money(price)
		if tier == policy.TierSpot {
			o.PreemptionRate = ptr(0.01)
		}
		return o
	}
	return job, []policy.Offer{
		mk("fsn-spot", "fsn1", policy.TierSpot, "1.00 EUR"),
		mk("fsn2-spot", "fsn2", policy.TierSpot, "1.10 EUR"),
		mk("fsn-od", "fsn1", policy.TierOnDemand, "2.00 EUR"),
	}
}

func TestReplaceMovesAwayFromAPoolThatJustPreempted(t *testing.T) {
	t.Parallel()
	job, offers := spotWorld()
	first, err := policy.Place(job, offers, baseRules(), now)
	if err != nil || first.Chosen.Offer.Pool != "fsn-spot" {
		t.Fatalf("first placement = %+v, %v", first.Chosen, err)
	}
	later := now.Add(2 * time.Hour)
	history := policy.History{Events: []policy.Event{{Pool: "fsn-spot", Kind: policy.EventPreempted, At: later.Add(-time.Minute)}}}
	next, err := policy.Replace(job, offers, baseRules(), first, history, later)
	if err != nil {
		t.Fatal(err)
	}
	if next.Chosen.Offer.Pool != "fsn2-spot" || next.Version != 2 {
		t.Errorf("next = v%d %s, want v2 fsn2-spot", next.Version, next.Chosen.Offer.Pool)
	}
	if next.Notes[0] != "moved from pool fsn-spot to pool fsn2-spot" {
		t.Errorf("notes = %q", next.Notes)
	}
	if r := next.ReasonsOf(next.Rejected()[0]); r[0].Code != policy.ReasonAvoided || !strings.Contains(r[0].Message, "pool fsn-spot preempted the job at") {
		t.Errorf("rejected = %+v", next.Rejected())
	}
	// Once AvoidFor has passed the cheap pool is back.
	again, err := policy.Replace(job, offers, baseRules(), next, history, later.Add(2*time.Hour))
	if err != nil || again.Chosen.Offer.Pool != "fsn-spot" {
		t.Errorf("after avoid_for: %+v, %v", again.Chosen, err)
	}
}

func TestReplaceAvoidsAPoolWithoutCapacity(t *testing.T) {
	t.Parallel()
	job, offers := spotWorld()
	first, _ := policy.Place(job, offers, baseRules(), now)
	history := policy.History{Events: []policy.Event{{Pool: "fsn-spot", Kind: policy.EventNoCapacity, At: now}}}
	next, err := policy.Replace(job, offers, baseRules(), first, history, now.Add(time.Minute))
	if err != nil || next.Chosen.Offer.Pool != "fsn2-spot" {
		t.Fatalf("next = %+v, %v", next.Chosen, err)
	}
	if r := next.ReasonsOf(next.Rejected()[0]); !strings.Contains(r[0].Message, "had no capacity") {
		t.Errorf("reason = %+v", r)
	}
}

func TestReplaceEscalatesToOnDemandAfterRepeatedPreemptions(t *testing.T) {
	t.Parallel()
	job, offers := spotWorld()
	rules := baseRules()
	rules.Replacement.EscalateAfter = 2
	rules.Replacement.AvoidFor = time.Minute
	first, _ := policy.Place(job, offers, rules, now)
	history := policy.History{Events: []policy.Event{
		{Pool: "fsn-spot", Kind: policy.EventPreempted, At: now.Add(time.Hour)},
		{Pool: "fsn2-spot", Kind: policy.EventPreempted, At: now.Add(2 * time.Hour)},
	}}
	next, err := policy.Replace(job, offers, rules, first, history, now.Add(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if next.Chosen.Offer.Tier != policy.TierOnDemand {
		t.Errorf("chosen %s, want on-demand", next.Chosen.Offer.Pool)
	}
	if next.Notes[0] != "spot: escalated to on-demand after 2 preemptions within 6h0m0s" {
		t.Errorf("notes = %q", next.Notes)
	}
	// Preemptions outside the window do not count.
	calm, err := policy.Replace(job, offers, rules, first, history, now.Add(9*time.Hour))
	if err != nil || calm.Chosen.Offer.Tier != policy.TierSpot {
		t.Errorf("outside window: %+v, %v", calm.Chosen, err)
	}
}

func TestReplaceNeverWidensResidency(t *testing.T) {
	t.Parallel()
	job, offers := spotWorld()
	job.Residency = ""
	first, err := policy.Place(job, offers, baseRules(), now)
	if err != nil || first.Residency.Class != "EU" {
		t.Fatalf("first = %+v, %v", first.Residency, err)
	}
	// The rule is gone and the only offers left are in Norway and the US.
	wider := baseRules()
	wider.Rules = nil
	no := baseOffer()
	no.Pool, no.Country = "osl", "NO"
	us := baseOffer()
	us.Pool, us.Country = "use1", "US"
	_, err = policy.Replace(job, []policy.Offer{no, us}, wider, first, policy.History{}, now.Add(time.Hour))
	var refusal *policy.NoPlacementError
	if !errors.As(err, &refusal) {
		t.Fatalf("Replace = %v, want a refusal", err)
	}
	if got := refusal.Decision.Residency; got.Class != "EU" || got.ImposedBy[0] != "placement v1" {
		t.Errorf("residency = %+v", got)
	}
	if msg := refusal.Decision.ReasonsOf(refusal.Decision.Rejected()[0])[0].Message; msg != "region fsn1 (NO) outside residency EU required by placement v1" {
		t.Errorf("reason = %q", msg)
	}
}
