package control_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// A control loop given a bad configuration refuses to start and names the
// field at fault.
func TestControlLoopsRefuseBadConfigNamingTheField(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, nil)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		run  func() error
		want string
	}{
		{"scheduler without store", func() error { return (&control.Scheduler{JS: n.JS, Placer: &recordingPlacer{}}).Run(ctx) }, "scheduler.store: must be set"},
		{"scheduler batch", func() error {
			return (&control.Scheduler{JS: n.JS, Store: s, Placer: &recordingPlacer{}, BatchSize: -1}).Run(ctx)
		}, "scheduler.batch_size: must be 1–10000, got -1"},
		{"scheduler batches in flight", func() error {
			return (&control.Scheduler{JS: n.JS, Store: s, Placer: &recordingPlacer{}, InFlight: 17}).Run(ctx)
		}, "scheduler.in_flight: must be 1–16, got 17"},
		{"reconciler interval", func() error {
			return (&control.Reconciler{JS: n.JS, Store: s, Interval: -1}).Run(ctx)
		}, "reconciler.interval: must not be negative"},
		{"replacer without placer", func() error { return (&control.Replacer{JS: n.JS, Store: s}).Run(ctx) }, "replacer.placer: must be set"},
		{"supervisor without launcher", func() error { return (&control.Supervisor{}).Supervise(ctx, localPool) }, "supervisor.launcher: must be set"},
	} {
		err := c.run()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}

var localPool = local.PoolConfig{Pool: "p", Region: "eu-central-1", Country: "DE", Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: "on-demand", PricePerHour: "1"}

// A control loop stopped while it starts ends without an error, as it does
// when stopped later: a server that stops before its loops are up does not
// report them as failed.
func TestControlLoopsStoppedWhileStartingEndCleanly(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	placer := &recordingPlacer{}
	for name, run := range map[string]func(context.Context) error{
		"scheduler": (&control.Scheduler{JS: n.JS, Store: s, Placer: placer}).Run,
		"replacer":  (&control.Replacer{JS: n.JS, Store: s, Placer: placer}).Run,
	} {
		if err := run(ctx); err != nil {
			t.Errorf("%s stopped while starting: %v, want nil", name, err)
		}
	}
}
