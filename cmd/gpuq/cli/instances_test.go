package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
)

func TestInstancesAndSpendShowTheInstanceTableWithIdleApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := queuetest.StartNATS(t)
	s, url := queuetest.Store(t, n)
	conn := []string{"--nats-url", n.URL, "--database-url", url}
	launched := time.Now().Add(-90 * time.Minute)
	for _, in := range []queue.NewInstance{
		{ID: "gq-a", Provider: "sim", Pool: "gpu", ClientToken: "gq-a", Slots: 1, PriceMicros: 2_000_000, Currency: "EUR", Billing: queue.BillPerHour},
		{ID: "gq-b", Provider: "sim", Pool: "cpu", ClientToken: "gq-b", Slots: 1, PriceMicros: 360_000, Currency: "EUR", Billing: queue.BillPerSecond},
	} {
		if _, err := s.RecordInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ChangeInstance(ctx, queue.InstanceChange{ID: in.ID, From: []queue.InstanceState{queue.InstanceRequested},
			To: queue.InstancePending, ProviderID: "p-" + in.ID, LaunchedAt: &launched}); err != nil {
			t.Fatal(err)
		}
	}
	ended := launched.Add(100 * time.Second)
	if _, err := s.ChangeInstance(ctx, queue.InstanceChange{ID: "gq-b", From: []queue.InstanceState{queue.InstancePending},
		To: queue.InstanceTerminated, EndedAt: &ended, Reason: "idle for 5m0s"}); err != nil {
		t.Fatal(err)
	}

	out, errOut, err := runCLI(t, append([]string{"instances", "--pool", "cpu", "-o", "json"}, conn...)...)
	if err != nil {
		t.Fatalf("instances: %v\n%s", err, errOut)
	}
	var list []queue.Instance
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 || list[0].ID != "gq-b" || list[0].Reason != "idle for 5m0s" {
		t.Fatalf("instances --pool cpu: %v %s", err, out)
	}
	if _, _, err := runCLI(t, append([]string{"instances", "--state", "asleep"}, conn...)...); err == nil || !strings.Contains(err.Error(), "--state") {
		t.Fatalf("a bad --state: %v", err)
	}
	if _, _, err := runCLI(t, append([]string{"instances", "--pool", "a.b"}, conn...)...); err == nil || !strings.Contains(err.Error(), "--pool") {
		t.Fatalf("a bad --pool: %v", err)
	}
	if _, _, err := runCLI(t, append([]string{"instances", "--after", "3"}, conn...)...); err == nil || !strings.Contains(err.Error(), "--after") {
		t.Fatalf("--after without --watch: %v", err)
	}

	out, errOut, err = runCLI(t, append([]string{"spend", "-o", "json"}, conn...)...)
	if err != nil {
		t.Fatalf("spend: %v\n%s", err, errOut)
	}
	var r control.SpendReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	// gq-a: 90 minutes and counting, billed by the hour: 2 hours, 4 EUR.
	// gq-b: 100 s at 0.36 EUR/h: 10,000 micros. No job ran: all idle.
	if len(r.Totals) != 1 || r.Totals[0].Micros != 4_010_000 || r.Totals[0].IdleMicros != 4_010_000 {
		t.Fatalf("spend totals: %+v", r.Totals)
	}
	out, _, err = runCLI(t, append([]string{"spend"}, conn...)...)
	if err != nil || !strings.Contains(out, "idle") || !strings.Contains(out, "4.01 EUR") {
		t.Fatalf("spend table: %v\n%s", err, out)
	}
}

func TestInstancesWatchFollowsTheAnnouncedEventsFromJetStreamOnTheControlPlaneHost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := queuetest.StartNATS(t)
	s, url := queuetest.Store(t, n)
	announcer := &control.InstanceAnnouncer{Store: s, JS: n.JS}
	if _, err := s.RecordInstance(ctx, queue.NewInstance{ID: "gq-w", Provider: "sim", Pool: "gpu", ClientToken: "gq-w", Slots: 1,
		PriceMicros: 1, Currency: "EUR", Billing: queue.BillPerSecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ChangeInstance(ctx, queue.InstanceChange{ID: "gq-w", From: []queue.InstanceState{queue.InstanceRequested},
		To: queue.InstanceFailed, Reason: "no capacity"}); err != nil {
		t.Fatal(err)
	}
	if got, err := announcer.Pass(ctx); err != nil || got != 2 {
		t.Fatalf("announcing: %d %v", got, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := &syncBuffer{}
	cmd := New()
	cmd.SetArgs([]string{"instances", "--watch", "--after", "1", "--nats-url", n.URL, "--database-url", url})
	cmd.SetOut(out)
	cmd.SetErr(out)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(wctx) }()
	queuetest.Eventually(t, 10*time.Second, "the watch to print the second event", func() bool {
		return strings.Contains(out.String(), "gq-w  gpu  failed  no capacity")
	})
	if strings.Contains(out.String(), "requested") {
		t.Fatalf("--after 1 printed the first event too:\n%s", out.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("an interrupted watch ends without error: %v", err)
	}
}
