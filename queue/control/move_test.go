package control_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/policy/spot"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

// After a preemption in zone a, whose spot capacity has been gone long, the
// re-placement moves the job to zone b's spot when the checkpoint's egress
// is cheap, and to on-demand when moving the checkpoint costs more than b's
// spot would save: the strategy sees the checkpoint's zone, the move's
// egress and the prices. A zone b of a's own region shares its checkpoint
// store, so moving there costs no egress however dear it is. The job has 30
// minutes of slack left, under the strategy's reserve, and a's outage is
// expected to last 40 more minutes.
func TestReplacementMovesToTheOtherZonesSpotOnlyWhenTheMovePays(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	spec := mustSpec(t, "command: [/bin/true]\nplacement: {tier: spot-then-on-demand}\nexpected_duration: 4h\ndeadline: "+
		t0.Add(349*time.Minute).Format(time.RFC3339)+"\n")
	job, err := control.PolicyJob(spec)
	if err != nil {
		t.Fatal(err)
	}
	offer := func(pool, region string, tier policy.Tier, price int64, avail policy.Availability, egress int64) policy.Offer {
		return policy.Offer{Provider: "sim", Pool: pool, Region: region, Country: "DE", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: tier,
			PricePerHour: policy.Money{Micros: price, Currency: "EUR"}, Availability: avail,
			EgressPerGB: &policy.Money{Micros: egress, Currency: "EUR"}}
	}
	offers := func(aUp bool, egress int64, bRegion string) *control.Offers {
		list := []policy.Offer{
			offer("a-spot", "eu-a", policy.TierSpot, 300_000, policy.Available, egress),
			offer("a-od", "eu-a", policy.TierOnDemand, 1_000_000, policy.Available, egress),
		}
		if !aUp { // a's spot is gone; b's is offered
			list[0].Availability = policy.Unavailable
			list = append(list, offer("b-spot", bRegion, policy.TierSpot, 300_000, policy.Available, egress))
		}
		o := control.NewOffers(list)
		// a was up for hours, then has been down for the last 40 minutes;
		// b has been up all along.
		o.Histories = map[string]spot.PoolHistory{
			"a-spot": {Ticks: 1500, UpTicks: 1260, UpRuns: 2, Run: 240},
			"b-spot": {Ticks: 1500, UpTicks: 1500, UpRuns: 1, Run: 1500},
		}
		return o
	}
	first, err := control.Decide(control.Question{Job: job, SubmittedAt: t0, Offers: offers(true, 10_000, "eu-b"), Now: t0})
	if err != nil || first.Chosen.Offer.Pool != "a-spot" {
		t.Fatalf("first placement %v, %v; want a-spot", first.Chosen, err)
	}
	body, err := json.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(70 * time.Minute)
	id := uuid.New()
	started, ended := t0.Add(60*time.Minute), t0.Add(61*time.Minute)
	prior := &control.Prior{
		Placement:  queue.Placement{Version: 1, Pool: "a-spot", Region: "eu-a", Decision: body},
		Attempts:   []queue.Attempt{{Attempt: 1, Pool: "a-spot", StartedAt: started, HeartbeatAt: ended, EndedAt: &ended, Outcome: queue.OutcomePreempted}},
		Checkpoint: &queue.Checkpoint{JobID: id, Seq: 3, Attempt: 1, Bytes: 20e9, Region: "eu-a"},
	}
	for _, c := range []struct {
		name          string
		egressPerGB   int64 // micros of EUR
		bRegion       string
		pool, advises string
	}{
		{"cheap egress", 10_000, "eu-b", "b-spot", "advises spot"},    // 0.20 EUR to move 20 GB
		{"dear egress", 100_000, "eu-b", "a-od", "advises on-demand"}, // 2.00 EUR: more than b's spot saves
		{"dear egress, b in a's region", 100_000, "eu-a", "b-spot", "advises spot"},
	} {
		d, err := control.Decide(control.Question{Job: job, SubmittedAt: t0, Prior: prior, Offers: offers(false, c.egressPerGB, c.bRegion), Now: now})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		notes := strings.Join(d.Notes, "; ")
		if d.Chosen.Offer.Pool != c.pool || !strings.Contains(notes, c.advises) {
			t.Errorf("%s: placed on %s (%s), want %s (%s)", c.name, d.Chosen.Offer.Pool, notes, c.pool, c.advises)
		}
	}
}
