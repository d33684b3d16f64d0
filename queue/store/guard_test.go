package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// A placement is decided on a snapshot of spend; spend that accrued before
// the commit must not push the project over its budget. The commit re-checks
// every budget guard in SQL and turns a placement that no longer fits into a
// rejection with the guard's reason.
func TestCommitRejectsAPlacementThatSpendRecordedSinceTheDecisionPushesOverBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)

	// A running job of project vision that has cost 10 EUR so far.
	running := uuid.New()
	if _, err := s.RecordJobs(ctx, []queue.NewJob{{ID: running, Spec: mustSpec(t, "project: vision\ncommand: [/bin/true]")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordPlacements(ctx, []queue.PlacedJob{{JobID: running, Placement: queue.Placement{Version: 1, Pool: "p", Region: "r", PriceMicros: 3_600_000_000, Currency: "EUR"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := claim(t, s, running, time.Minute); err != nil {
		t.Fatal(err)
	}
	// 3600 EUR/h over 10 s since the attempt's start is 10 EUR.
	if _, err := s.DB.Exec(`UPDATE attempts SET started_at = heartbeat_at - interval '10 seconds' WHERE job_id = $1`, running); err != nil {
		t.Fatal(err)
	}
	spend, err := s.Spend(ctx, "vision", time.Time{})
	if err != nil || spend["EUR"] != 10_000_000 {
		t.Fatalf("spend of vision = %v, %v; want 10 EUR", spend, err)
	}
	// The job's own spend, as gpuq status and a notification show it.
	if own, err := s.JobSpend(ctx, running); err != nil || len(own) != 1 || own["EUR"] != 10_000_000 {
		t.Fatalf("spend of the job = %v, %v; want 10.00 EUR", own, err)
	}
	if none, err := s.JobSpend(ctx, uuid.New()); err != nil || len(none) != 0 {
		t.Fatalf("spend of no job = %v, %v", none, err)
	}

	eur := map[string]int64{"EUR": 1_000_000}
	guard := func(limitEUR int64, rates map[string]int64, reason string) []queue.BudgetGuard {
		return []queue.BudgetGuard{{Project: "vision", Since: time.Now().Add(-time.Hour), LimitMicros: limitEUR * 1_000_000,
			CostMicros: 1_000_000, Rates: rates, Reason: reason}}
	}
	over, fits, noRate, unguarded := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	var jobs []queue.NewJob
	for _, id := range []uuid.UUID{over, fits, noRate, unguarded} {
		jobs = append(jobs, queue.NewJob{ID: id, Spec: mustSpec(t, "project: vision\ncommand: [/bin/true]")})
	}
	placement := func(id uuid.UUID, g []queue.BudgetGuard) queue.PlacedJob {
		return queue.PlacedJob{JobID: id, Placement: queue.Placement{Version: 1, Pool: "p", Region: "r", Guards: g}}
	}
	_, placed, err := s.RecordAndPlace(ctx, jobs, queue.Decided{Placed: []queue.PlacedJob{
		placement(over, guard(10, eur, "budget vision: 10 EUR a month")), // 10 spent + 1 > 10
		placement(fits, guard(11, eur, "never")),                         // 10 + 1 ≤ 11
		placement(noRate, guard(100, map[string]int64{"USD": 900_000}, "no rate for EUR")),
		placement(unguarded, nil),
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[uuid.UUID]bool{}
	for _, p := range placed {
		got[p.JobID] = true
	}
	if !got[fits] || !got[unguarded] || got[over] || got[noRate] || len(placed) != 2 {
		t.Fatalf("placements that took effect: %v", placed)
	}
	for id, want := range map[uuid.UUID]queue.JobState{over: queue.StateRejected, noRate: queue.StateRejected, fits: queue.StatePlaced, unguarded: queue.StatePlaced} {
		j, err := s.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != want {
			t.Errorf("job %s is %s, want %s", id, j.State, want)
		}
	}
	j, err := s.Job(ctx, over)
	if err != nil {
		t.Fatal(err)
	}
	if j.Reason != "budget vision: 10 EUR a month" {
		t.Errorf("rejection reason %q, want the guard's", j.Reason)
	}
	events, err := s.EventsOf(ctx, over)
	if err != nil {
		t.Fatal(err)
	}
	if last := events[len(events)-1]; last.State != queue.StateRejected || last.Message != j.Reason {
		t.Errorf("the audit trail ends with %+v, want the rejection and its reason", last)
	}
}

// Two schedulers committing placements for one project at the same moment
// must not overspend together: each commit takes the project's budget lock
// and sees the reservations of the commits before it. Four concurrent
// commits of 15 jobs at 0.10 EUR against a 1 EUR cap place exactly 10.
func TestConcurrentCommitsCannotOverspendAProjectBudgetTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	for round := range 3 {
		project := fmt.Sprintf("vision%d", round)
		guard := []queue.BudgetGuard{{Project: project, Since: time.Now().Add(-time.Hour), LimitMicros: 1_000_000,
			CostMicros: 100_000, Rates: map[string]int64{"EUR": 1_000_000}, Reason: "budget " + project}}
		// Every job is recorded first, so that only the commits of the
		// placements run together.
		var batches [][]queue.PlacedJob
		for range 4 {
			var jobs []queue.NewJob
			var placed []queue.PlacedJob
			for range 15 {
				id := uuid.New()
				jobs = append(jobs, queue.NewJob{ID: id, Spec: mustSpec(t, "project: "+project+"\ncommand: [/bin/true]")})
				placed = append(placed, queue.PlacedJob{JobID: id, Placement: queue.Placement{Version: 1, Pool: "p", Region: "r",
					PriceMicros: 100_000, Currency: "EUR", EstimateMicros: 100_000, EstimateCurrency: "EUR", Guards: guard}})
			}
			if _, err := s.RecordJobs(ctx, jobs); err != nil {
				t.Fatal(err)
			}
			batches = append(batches, placed)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, len(batches))
		for _, placed := range batches {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := s.CommitPlacements(ctx, queue.Decided{Placed: placed})
				errs <- err
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		var placedN, rejectedN int
		if err := s.DB.QueryRow(`SELECT count(*) FILTER (WHERE state = 'placed'), count(*) FILTER (WHERE state = 'rejected') FROM jobs WHERE project = $1`,
			project).Scan(&placedN, &rejectedN); err != nil {
			t.Fatal(err)
		}
		if placedN != 10 || rejectedN != 50 {
			t.Fatalf("round %d: %d placed and %d rejected of 60 jobs at 0.10 EUR against a 1 EUR cap; want 10 and 50", round, placedN, rejectedN)
		}
	}
}

// What a job reserves is its estimate less what it has accrued; once it
// finishes, the unused part is released and only its spend is charged.
func TestAFinishedJobReleasesTheUnusedPartOfItsReservation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	id := uuid.New()
	if _, err := s.RecordJobs(ctx, []queue.NewJob{{ID: id, Spec: mustSpec(t, "project: vision\ncommand: [/bin/true]")}}); err != nil {
		t.Fatal(err)
	}
	// 3600 EUR/h, estimated at 100 EUR.
	if _, err := s.RecordPlacements(ctx, []queue.PlacedJob{{JobID: id, Placement: queue.Placement{Version: 1, Pool: "p", Region: "r",
		PriceMicros: 3_600_000_000, Currency: "EUR", EstimateMicros: 100_000_000, EstimateCurrency: "EUR"}}}); err != nil {
		t.Fatal(err)
	}
	charged := func() int64 {
		t.Helper()
		c, err := s.Charged(ctx, "vision", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return c["EUR"]
	}
	if got := charged(); got != 100_000_000 {
		t.Fatalf("a placed job must reserve its estimate: charged %d micros", got)
	}
	c, err := claim(t, s, id, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// 10 s at one euro a second: 10 spent, 90 still reserved.
	if _, err := s.DB.Exec(`UPDATE attempts SET started_at = heartbeat_at - interval '10 seconds' WHERE job_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if got := charged(); got != 100_000_000 {
		t.Fatalf("spend plus what is still reserved must stay the estimate while it runs: charged %d micros", got)
	}
	if err := s.Succeed(ctx, id, c.Job.Attempt, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB.Exec(`UPDATE attempts SET started_at = ended_at - interval '10 seconds' WHERE job_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if got := charged(); got != 10_000_000 {
		t.Fatalf("a finished job is charged its spend only: charged %d micros, want 10 EUR", got)
	}
}
