package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
)

func threePools(t *testing.T) *control.PolicyPlacer {
	t.Helper()
	provider, err := local.New([]local.PoolConfig{
		{Pool: "spot-a", Region: "eu-central-1", Country: "DE", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: "spot", PricePerHour: "0.03"},
		{Pool: "spot-b", Region: "eu-west-3", Country: "FR", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: "spot", PricePerHour: "0.04"},
		{Pool: "od", Region: "eu-central-1", Country: "DE", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: "on-demand", PricePerHour: "0.10"},
		{Pool: "us-spot", Region: "us-east-1", Country: "US", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: "spot", PricePerHour: "0.01"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &control.PolicyPlacer{Sources: []adapters.OfferSource{provider}}
}

// poolCountries are the countries of threePools' pools, as the worker
// service's pool registry sets them on a claim.
var poolCountries = map[string]string{"spot-a": "DE", "spot-b": "FR", "od": "DE", "us-spot": "US"}

// preempt plays a worker of the job's pool: it claims the job and hands it
// back after a preemption notice.
func preempt(t *testing.T, s *store.Store, id uuid.UUID, version int, pool string) {
	t.Helper()
	ctx := context.Background()
	c, err := s.Claim(ctx, queue.ClaimRequest{JobID: id, PlacementVersion: version, Lease: time.Minute, WorkerID: "w", Host: "h", PID: 1, Pool: pool, Country: poolCountries[pool]})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Requeue(ctx, id, c.Job.Attempt, queue.OutcomePreempted, nil, "preempted: handed back after the notice"); err != nil {
		t.Fatal(err)
	}
}

func TestPreemptedJobIsRePlacedOnPlanBInsideItsResidency(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	store, _ := queuetest.Store(t, n)
	placer := threePools(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go (&control.Scheduler{JS: n.JS, Store: store, Placer: placer}).Run(ctx) //nolint:errcheck // ends with ctx
	go (&control.Replacer{JS: n.JS, Store: store, Placer: placer}).Run(ctx)  //nolint:errcheck // ends with ctx
	spec := mustSpec(t, "command: [/bin/true]\nplacement: {tier: spot-then-on-demand, residency: EU}\n")
	sub, err := queue.Submit(ctx, n.JS, spec)
	if err != nil {
		t.Fatal(err)
	}
	id := sub.JobID
	waitPlacement := func(version int, pool string) {
		t.Helper()
		queuetest.Eventually(t, 20*time.Second, fmt.Sprintf("placement %d on %s", version, pool), func() bool {
			j, err := store.Job(ctx, id)
			return err == nil && j.State == queue.StatePlaced && j.PlacementVersion == version && j.Pool == pool
		})
	}
	waitPlacement(1, "spot-a")
	preempt(t, store, id, 1, "spot-a")
	waitPlacement(2, "spot-b")
	preempt(t, store, id, 2, "spot-b")
	waitPlacement(3, "od")
	// The replacer publishes the run message after it commits the
	// placement the test has just seen.
	var msgs map[string]uint64
	queuetest.Eventually(t, 10*time.Second, "the run message on od", func() bool {
		msgs = queuetest.RunMessages(t, n.JS)
		return msgs[queue.RunSubject("od", id.String())] > 0
	})
	for _, pool := range []string{"spot-b", "od"} {
		if msgs[queue.RunSubject(pool, id.String())] != 1 {
			t.Fatalf("want one run message on %s, got %v", pool, msgs)
		}
	}
	if msgs[queue.RunSubject("us-spot", id.String())] != 0 {
		t.Fatal("re-placement left the residency")
	}
	var nc *queue.NotClaimableError
	_, err = store.Claim(ctx, queue.ClaimRequest{JobID: id, PlacementVersion: 1, Lease: time.Minute, WorkerID: "w", Host: "h", PID: 1, Pool: "spot-a", Country: "DE"})
	if !errors.As(err, &nc) || !nc.Stale {
		t.Fatalf("a worker holding the old placement's message must find it stale, got %v", err)
	}
	p, err := store.LatestPlacement(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Residency struct {
			Class string `json:"class"`
		} `json:"residency"`
		Rejected int `json:"rejected_count"`
	}
	if err := json.Unmarshal(p.Decision, &d); err != nil || d.Residency.Class != "EU" || d.Rejected < 3 {
		t.Fatalf("the re-placement decision must keep EU and count the rejections: %s", p.Decision)
	}
	// The full re-placement decision is recomputed from what it was
	// decided from: the previous decision and the job's preemptions
	// included, every rejected offer has its reasons.
	full, err := control.Explain(ctx, store, id)
	if err != nil {
		t.Fatal(err)
	}
	if full.Version != 3 || full.Chosen == nil || full.Chosen.Offer.Pool != "od" || full.RejectedCount() != d.Rejected {
		t.Fatalf("explained re-placement: version %d, chosen %+v, %d rejected; want version 3 on od with %d rejected", full.Version, full.Chosen, full.RejectedCount(), d.Rejected)
	}
	// Its notes are the stored decision's, each once.
	var storedNotes struct {
		Notes []string `json:"notes"`
	}
	if err := json.Unmarshal(p.Decision, &storedNotes); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(full.Notes, "moved from pool spot-b to pool od") || !slices.Equal(full.Notes, storedNotes.Notes) {
		t.Fatalf("explained notes %q, stored %q: want the move noted once, as stored", full.Notes, storedNotes.Notes)
	}
	// A recipe stored by an earlier version held every note of its
	// decision: replayed, each is still shown once.
	if _, err := store.DB.ExecContext(ctx, `UPDATE placement_recipes SET recipe = jsonb_set(recipe, '{notes}', to_jsonb($2::text[]))
		WHERE job_id = $1 AND version = 3`, id, "{"+strings.Join(storedNotes.Notes, ",")+"}"); err != nil {
		t.Fatal(err)
	}
	if again, err := control.Explain(ctx, store, id); err != nil || !slices.Equal(again.Notes, storedNotes.Notes) {
		t.Fatalf("an earlier recipe's notes, explained: %v %v", again, err)
	}
	for _, r := range full.Rejected() {
		if len(full.ReasonsOf(r)) == 0 {
			t.Fatalf("rejected offer %d has no reason", r.Offer)
		}
	}
	// The trail numbers each re-placement with the attempt that was handed
	// back, as `gpuq wait` and `gpuq status` show it.
	events, err := store.EventsOf(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var replaced []string
	for _, e := range events {
		if strings.HasPrefix(e.Message, "re-placed on pool") {
			replaced = append(replaced, fmt.Sprintf("%d %s", e.Attempt, e.Message))
		}
	}
	if want := []string{"1 re-placed on pool spot-b (placement 2)", "2 re-placed on pool od (placement 3)"}; !slices.Equal(replaced, want) {
		t.Fatalf("re-placement events: got %q, want %q", replaced, want)
	}
}

func TestDeadlineJobsFollowTheSpotStrategy(t *testing.T) {
	t.Parallel()
	placer := threePools(t)
	now := time.Now()
	place := func(slack time.Duration) (queue.Placement, string) {
		t.Helper()
		deadline := now.Add(2*time.Hour + slack).UTC().Format(time.RFC3339)
		spec := mustSpec(t, "command: [/bin/true]\nplacement: {tier: spot-then-on-demand, residency: EU}\nexpected_duration: 2h\ndeadline: "+deadline+"\n")
		p, err := placer.Place(context.Background(), &queue.Job{ID: uuid.New(), Spec: spec, SubmittedAt: now}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Notes []string `json:"notes"`
		}
		json.Unmarshal(p.Decision, &d) //nolint:errcheck // checked through the notes
		return p, strings.Join(d.Notes, "; ")
	}
	if p, notes := place(48 * time.Hour); p.Pool != "spot-a" || !strings.Contains(notes, "spot strategy gpuq-lookahead advises") {
		t.Fatalf("with two days of slack the job should wait for spot on the cheapest pool, got %s (%s)", p.Pool, notes)
	}
	if p, notes := place(time.Minute); p.Pool != "od" || !strings.Contains(notes, "advises on-demand") {
		t.Fatalf("with a minute of slack the job must go on-demand, got %s (%s)", p.Pool, notes)
	}
}
