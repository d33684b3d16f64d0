package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// fixedOffers is a provider whose offers never change.
type fixedOffers []policy.Offer

func (fixedOffers) Name() string { return "bulk" }

func (f fixedOffers) Offers(context.Context) ([]policy.Offer, error) { return f, nil }

// bulkOffers is n CPU offers, a third of them in the US, priced apart.
func bulkOffers(n int) fixedOffers {
	out := make(fixedOffers, n)
	for i := range out {
		country, region := "DE", "eu-central-1"
		if i%3 == 0 {
			country, region = "US", "us-east-1"
		}
		out[i] = policy.Offer{Provider: "bulk", Pool: fmt.Sprintf("pool-%d", i), Region: region, Country: country,
			Card: "cpu", VCPU: 4 << (i % 3), MemoryGB: 16, Tier: policy.TierOnDemand, Availability: policy.Available,
			PricePerHour: policy.Money{Micros: int64(10_000 + 97*i%5000), Currency: "EUR"}}
	}
	return out
}

// The scheduler stores a placement's decision in its compact form (chosen,
// plan B, rejections counted by reason) and what it was decided from;
// Explain recomputes the full decision, equal to the one the scheduler
// made, every rejected offer with its reasons.
func TestStoredDecisionIsCompactAndExplainRecomputesItInFull(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	st, _ := queuetest.Store(t, n)
	offers := bulkOffers(3000)
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	placer := &control.PolicyPlacer{Sources: []adapters.OfferSource{offers}, Now: func() time.Time { return now }}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go (&control.Scheduler{JS: n.JS, Store: st, Placer: placer}).Run(ctx) //nolint:errcheck // ends with ctx

	specYAML := "command: [/bin/true]\nresources: {cpu: 8}\nplacement: {residency: EU}\n"
	var ids []string
	for range 3 {
		sub, err := queue.Submit(ctx, n.JS, mustSpec(t, specYAML))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sub.JobID.String())
	}
	for _, id := range ids {
		queuetest.Eventually(t, 30*time.Second, "job "+id+" placed", func() bool {
			j, err := st.Job(ctx, uuid.MustParse(id))
			return err == nil && j.State == queue.StatePlaced
		})
	}
	var snapshots int
	if err := st.DB.QueryRow(`SELECT count(*) FROM offer_snapshots`).Scan(&snapshots); err != nil || snapshots != 1 {
		t.Fatalf("three placements from one offer refresh must share one snapshot, got %d (%v)", snapshots, err)
	}

	id := uuid.MustParse(ids[0])
	p, err := st.LatestPlacement(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var stored policy.Compact
	if err := json.Unmarshal(p.Decision, &stored); err != nil {
		t.Fatal(err)
	}
	want, err := control.Decide(control.Question{Job: mustPolicyJob(t, specYAML), Offers: control.NewOffers(offers), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	full, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Decision) > len(full)/10 || stored.Offers != 3000 || stored.Rejected != want.RejectedCount() || stored.Chosen == nil ||
		stored.Chosen.Offer.Pool != want.Chosen.Offer.Pool || len(stored.Reasons) == 0 {
		t.Fatalf("stored decision (%d bytes, full %d): offers %d rejected %d chosen %+v reasons %d; want the compact form of %d rejections",
			len(p.Decision), len(full), stored.Offers, stored.Rejected, stored.Chosen, len(stored.Reasons), want.RejectedCount())
	}

	got, err := control.Explain(ctx, st, id)
	if err != nil {
		t.Fatal(err)
	}
	explained, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if string(explained) != string(full) {
		t.Fatalf("explained decision differs from the scheduler's (%d vs %d bytes)", len(explained), len(full))
	}

	// Past retention the snapshot goes, the compact decision stays, and
	// Explain says why it cannot recompute.
	if _, err := st.PruneOfferSnapshots(ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := control.Explain(ctx, st, id); err != control.ErrNoReplay {
		t.Fatalf("after pruning, want ErrNoReplay, got %v", err)
	}
	if p2, err := st.LatestPlacement(ctx, id); err != nil || string(p2.Decision) != string(p.Decision) {
		t.Fatalf("pruning must keep the stored decision: %v", err)
	}
}

func mustPolicyJob(t *testing.T, yaml string) policy.Requirements {
	t.Helper()
	j, err := control.PolicyJob(mustSpec(t, yaml))
	if err != nil {
		t.Fatal(err)
	}
	return j
}
