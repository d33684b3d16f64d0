package control_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// A project whose running jobs' spend reaches its budget has them stopped:
// each job's worker is asked once, and a job still running a grace later is
// ended by the control plane itself, fenced so that its worker can record
// nothing more. Another project's job runs on.
func TestProjectBudgetReachedStopsItsRunningJobsAndEndsThoseNotStopped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	rules := visionBudget(5)
	placer := &control.PolicyPlacer{Sources: []adapters.OfferSource{priceyPool(t)}, Rules: rules, Spend: s.Charged}
	// run places and claims a job of project that has run for ran.
	run := func(project string, ran time.Duration) uuid.UUID {
		spec := mustSpec(t, "project: "+project+"\ncommand: [/bin/true]\nexpected_duration: 1s\n")
		jobs, err := s.RecordJobs(ctx, []queue.NewJob{{ID: uuid.New(), Spec: spec}})
		if err != nil {
			t.Fatal(err)
		}
		p, err := placer.Place(ctx, jobs[0], nil)
		if err != nil {
			t.Fatal(err)
		}
		p.Version = 1
		if _, err := s.RecordPlacements(ctx, []queue.PlacedJob{{JobID: jobs[0].ID, Placement: p}}); err != nil {
			t.Fatal(err)
		}
		c, err := s.Claim(ctx, queue.ClaimRequest{JobID: jobs[0].ID, PlacementVersion: 1, Lease: time.Minute, WorkerID: "w", Host: "h", PID: 1, Pool: "pricey"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB.Exec(`UPDATE attempts SET started_at = now() - $2::interval WHERE job_id = $1`, jobs[0].ID, ran.String()); err != nil {
			t.Fatal(err)
		}
		if err := s.Heartbeat(ctx, jobs[0].ID, c.Job.Attempt, time.Minute); err != nil {
			t.Fatal(err)
		}
		return jobs[0].ID
	}
	vision, other := run("vision", 6*time.Second), run("audio", 6*time.Second)
	stops := make(chan *nats.Msg, 10)
	sub, err := n.NC.ChanSubscribe(queue.CancelSubject("*"), stops)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // test ends
	stopper := &control.BudgetStop{Store: s, NATS: n.NC, Rules: rules, BudgetStopConfig: control.BudgetStopConfig{Grace: time.Minute}}
	now := time.Now()
	acted, err := stopper.Pass(ctx, now)
	if err != nil || len(acted) != 1 || acted[0] != vision {
		t.Fatalf("want only project vision's job stopped, got %v, %v", acted, err)
	}
	select {
	case m := <-stops:
		reason := m.Header.Get(queue.HeaderStop)
		if m.Subject != queue.CancelSubject(vision.String()) || !strings.Contains(reason, "over budget: project vision spent") || !strings.Contains(reason, "budgets[0] (vision month cap 5.00 EUR)") {
			t.Fatalf("want a stop request on the job's subject naming the budget, got %s %q", m.Subject, reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no stop request reached the job's worker")
	}
	if acted, _ := stopper.Pass(ctx, now.Add(time.Second)); len(acted) != 0 {
		t.Fatalf("a stop is asked for once while its grace runs, got %v again", acted)
	}
	if acted, err := stopper.Pass(ctx, now.Add(time.Minute+time.Second)); err != nil || len(acted) != 1 {
		t.Fatalf("a job still running after the grace must be ended, got %v, %v", acted, err)
	}
	j, err := s.Job(ctx, vision)
	if err != nil || j.State != queue.StateFailed || !strings.Contains(j.Reason, "its worker did not stop it within 1m0s") {
		t.Fatalf("want the job failed with the reason, got %+v, %v", j, err)
	}
	if attempts, _ := s.Attempts(ctx, vision); attempts[0].Outcome != queue.OutcomeOverBudget {
		t.Fatalf("want the attempt ended over_budget, got %+v", attempts[0])
	}
	if err := s.Heartbeat(ctx, vision, 1, time.Minute); err == nil {
		t.Fatal("the stopped attempt's worker must be fenced out")
	}
	if j, _ := s.Job(ctx, other); j.State != queue.StateRunning {
		t.Fatalf("another project's job must run on, got %s", j.State)
	}
}

func TestBudgetStopConfigNamesTheFieldThatIsWrong(t *testing.T) {
	for cfg, want := range map[control.BudgetStopConfig]string{
		{Interval: time.Millisecond}:         "budget_stop.interval",
		{Grace: time.Millisecond}:            "budget_stop.grace",
		{Webhook: "ftp://alerts.example"}:    "budget_stop.webhook",
		{Webhook: "https://"}:                "budget_stop.webhook",
		{Webhook: "https://hooks.example/x"}: "",
	} {
		err := cfg.Validate()
		if (want == "") != (err == nil) || (err != nil && !strings.HasPrefix(err.Error(), want)) {
			t.Errorf("%+v: want %q, got %v", cfg, want, err)
		}
	}
}
