package control_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

func TestSpendRoundsBilledTimeUpToTheOffersUnitAndSplitsJobsFromIdle(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	hourly := &queue.Instance{ID: "h", Pool: "p", Slots: 1, PriceMicros: 2_000_000, Currency: "EUR", Billing: queue.BillPerHour,
		LaunchedAt: at(0), EndedAt: at(61 * time.Minute)}
	perSecond := &queue.Instance{ID: "s", Pool: "p", Slots: 2, PriceMicros: 3_600_000, Currency: "EUR", Billing: queue.BillPerSecond,
		LaunchedAt: at(0), EndedAt: at(100*time.Second + time.Millisecond)}
	attempts := []queue.InstanceAttempt{
		{InstanceID: "h", Project: "a", From: t0, To: t0.Add(30 * time.Minute)},
		// Two slots: an attempt pays half the instance's price.
		{InstanceID: "s", Project: "b", From: t0.Add(-time.Hour), To: t0.Add(50 * time.Second)},
	}
	r := control.SpendOf([]*queue.Instance{hourly, perSecond}, attempts, t0.Add(2*time.Hour))
	// 61 minutes billed by the hour are two hours: 4 EUR; 100.001 s by the
	// second are 101 s at 1 micro per ms: 101,000 micros.
	if got := r.Instances[0]; got.BilledSeconds != 7200 || got.CostMicros != 4_000_000 || got.JobsMicros != 1_000_000 || got.IdleMicros != 3_000_000 {
		t.Fatalf("hourly instance: %+v", got)
	}
	if got := r.Instances[1]; got.BilledSeconds != 101 || got.CostMicros != 101_000 || got.JobsMicros != 25_000 || got.IdleMicros != 76_000 {
		t.Fatalf("per-second instance: %+v", got)
	}
	if tot := r.Totals[0]; tot.Micros != 4_101_000 || tot.IdleMicros != 3_076_000 || tot.Currency != "EUR" {
		t.Fatalf("totals: %+v", r.Totals)
	}
	if len(r.Projects) != 2 || r.Projects[0].Key != "a" || r.Projects[0].Micros != 1_000_000 || r.Projects[1].Micros != 25_000 {
		t.Fatalf("projects: %+v", r.Projects)
	}
}

func TestAutoscalerConfigRefusesBadLimitsNamingTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  control.AutoscalerConfig
		want string
	}{
		{control.AutoscalerConfig{Defaults: control.PoolLimits{Min: 5, Max: 2}}, "autoscaler.defaults.min: 5 is more than max 2"},
		{control.AutoscalerConfig{Pools: map[string]control.PoolLimits{"gpu": {Billing: "minute"}}}, "autoscaler.pools.gpu.billing"},
		{control.AutoscalerConfig{Pools: map[string]control.PoolLimits{"gpu": {MaxSpendPerHour: "ten"}}}, "autoscaler.pools.gpu.max_spend_per_hour"},
		{control.AutoscalerConfig{Defaults: control.PoolLimits{IdleTimeout: -time.Second}}, "autoscaler.defaults.idle_timeout"},
		{control.AutoscalerConfig{Interval: time.Microsecond}, "autoscaler.interval"},
		{control.AutoscalerConfig{Projects: map[string]control.ProjectLimits{"vision": {MaxInstances: -1}}}, "autoscaler.projects.vision.max_instances"},
	} {
		err := tc.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	// A pool's zero fields come from the defaults, then the built-in ones.
	l := control.AutoscalerConfig{Defaults: control.PoolLimits{Max: 7}, Pools: map[string]control.PoolLimits{"gpu": {Slots: 3}}}.Limits("gpu")
	if l.Max != 7 || l.Slots != 3 || l.IdleTimeout != 5*time.Minute || l.Billing != queue.BillPerSecond {
		t.Fatalf("limits of gpu: %+v", l)
	}
}
