package workers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// A euro a second, so that a few seconds of running reach a small budget.
var priceyPool = local.PoolConfig{Pool: "eu-pricey", Region: "eu-test-1", Country: "DE", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: "on-demand", PricePerHour: "3600"}

// A job that runs past its own budget.total is stopped as on a notice: it
// saves a final checkpoint in its grace, which is recorded, it ends failed
// with outcome over_budget and the reason, and the owner's webhook hears of
// it.
func TestJobThatReachesItsBudgetIsCheckpointedStoppedAndAlerted(t *testing.T) {
	t.Parallel()
	// Charged for its own 1 s estimate (1 EUR) at admission, not a minute.
	c := newClusterRules(t, policy.Rules{MinChargedDuration: time.Second}, priceyPool)
	var mu sync.Mutex
	var alerts []control.BudgetAlert
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a control.BudgetAlert
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad alert", http.StatusBadRequest)
			return
		}
		mu.Lock()
		alerts = append(alerts, a)
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	ctx, cancel := context.WithCancel(context.Background())
	stopper := &control.BudgetStop{Store: c.store, NATS: c.n.NC,
		BudgetStopConfig: control.BudgetStopConfig{Interval: 200 * time.Millisecond, Grace: 30 * time.Second, Webhook: hook.URL}}
	done := make(chan error, 1)
	go func() { done <- stopper.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	c.startPoolWorker(t, priceyPool, 3*time.Second, 5*time.Second)
	id := c.submit(t, counterJob(1000, "0.3")+"expected_duration: 1s\nbudget: {total: 3 EUR}\n")
	job := c.waitState(t, id, queue.StateFailed, 60*time.Second)
	if !strings.Contains(job.Reason, "over budget: the job's attempts spent") || !strings.Contains(job.Reason, "reaching its budget.total 3.00 EUR") {
		t.Fatalf("the reason must say the job reached its budget.total, got %q", job.Reason)
	}
	attempts := c.attempts(t, id)
	if last := attempts[len(attempts)-1]; last.Outcome != queue.OutcomeOverBudget {
		t.Fatalf("want the attempt ended over_budget, got %+v", last)
	}
	logs := c.logs(t, id)
	if !strings.Contains(logs, "notice at step") {
		t.Fatalf("the job must get SIGTERM and its grace, logs:\n%s", logs)
	}
	cps := c.checkpoints(t, id)
	final := c.checkpointStep(t, cps[len(cps)-1])
	if !strings.Contains(logs, "notice at step "+strconv.Itoa(final)) {
		t.Fatalf("the latest checkpoint (step %d) must be the one saved on the stop, logs:\n%s", final, logs)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(alerts) != 1 || alerts[0].JobID != id || alerts[0].Type != "budget.reached" || alerts[0].Reason != job.Reason {
		t.Fatalf("want one budget.reached alert for job %s with the job's reason, got %+v", id, alerts)
	}
}

// A job whose estimated cost exceeds its own budget, or whose pool's price
// exceeds its cap, is rejected with the reason and never dispatched, while a
// worker of the pool waits for work (invariant 5).
func TestJobOverItsOwnBudgetIsRejectedWithTheReasonAndNeverDispatched(t *testing.T) {
	t.Parallel()
	c := newCluster(t) // 0.10 EUR/h
	c.startWorker(t, 5*time.Second, time.Second)
	for spec, reason := range map[string]string{
		"expected_duration: 2h\nbudget: {total: 0.15 EUR}\n": "over the job budget 0.15 EUR",
		"budget: {max_price_per_hour: \"0.05 EUR\"}\n":       "1 offer over the price cap 0.05 EUR/h",
	} {
		id := c.submit(t, "command: [/bin/true]\n"+spec)
		job := c.waitState(t, id, queue.StateRejected, 30*time.Second)
		if !strings.Contains(job.Reason, reason) {
			t.Errorf("%q: rejected with %q, want the reason %q", spec, job.Reason, reason)
		}
		if a := c.attempts(t, id); len(a) != 0 {
			t.Errorf("%q: a rejected job ran: %+v", spec, a)
		}
	}
	within := c.submit(t, "command: [/bin/true]\nexpected_duration: 2h\nbudget: {total: 0.25 EUR, max_price_per_hour: \"0.10 EUR\"}\n")
	c.waitState(t, within, queue.StateSucceeded, 30*time.Second)
	// The rejected jobs had none; the one within its budget is acked once
	// its success is recorded.
	queuetest.Eventually(t, 10*time.Second, "no run message to be left", func() bool {
		return len(queuetest.RunMessages(t, c.n.JS)) == 0
	})
}
