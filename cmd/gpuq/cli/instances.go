package cli

import (
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

func newInstancesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "instances",
		Short: "List the machines the autoscaler rented, with their state, times, price and reason",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			format, err := outputFormat(v)
			if err != nil {
				return err
			}
			state := queue.InstanceState(v.GetString("state"))
			if state != "" && !slices.Contains(queue.InstanceStates, state) {
				return fmt.Errorf("--state: must be one of %v, got %q", queue.InstanceStates, state)
			}
			c, err := dial(cmd.Context(), v, true)
			if err != nil {
				return err
			}
			defer c.Close()
			list, err := c.store.Instances(cmd.Context(), v.GetString("pool"), state)
			if err != nil {
				return err
			}
			if format == "json" {
				if list == nil {
					list = []*queue.Instance{}
				}
				return writeJSON(cmd.OutOrStdout(), list)
			}
			now := time.Now()
			t := newTable(cmd.OutOrStdout(), "INSTANCE", "POOL", "STATE", "PROVIDER ID", "LAUNCHED", "BILLED", "PRICE/H", "COST", "REASON")
			for _, in := range list {
				launched := "-"
				if in.LaunchedAt != nil {
					launched = in.LaunchedAt.Format(time.DateTime)
				}
				t.row(in.ID, in.Pool, in.State, orDash(in.ProviderID), launched,
					(time.Duration(control.BilledSeconds(in, now)) * time.Second).String(),
					policy.Money{Micros: in.PriceMicros, Currency: in.Currency},
					policy.Money{Micros: control.InstanceCost(in, now), Currency: in.Currency}, truncate(in.Reason, 60))
			}
			return t.flush()
		},
	}
	connFlags(cmd)
	cmd.Flags().String("pool", "", "only instances of this pool")
	cmd.Flags().String("state", "", "only instances in this state (requested, pending, ready, draining, terminated, preempted, failed)")
	return cmd
}

func newSpendCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "spend",
		Short: "What the rented instances cost, per pool and project, with idle time apart",
		Long: `spend prices every instance billed in the window from its billed time (rounded up to the
second or hour its provider bills by) at its price, and attributes it to the jobs that ran on it:
an attempt's share is the price over its run time divided by the instance's slots. What no job
used is idle.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			format, err := outputFormat(v)
			if err != nil {
				return err
			}
			window := v.GetDuration("since")
			if window <= 0 {
				return fmt.Errorf("--since: must be a positive duration such as 24h, got %s", window)
			}
			c, err := dial(cmd.Context(), v, true)
			if err != nil {
				return err
			}
			defer c.Close()
			now := time.Now()
			r, err := control.Spend(cmd.Context(), c.store, now.Add(-window), now)
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), r)
			}
			money := func(micros int64, cur string) policy.Money { return policy.Money{Micros: micros, Currency: cur} }
			t := newTable(cmd.OutOrStdout(), "WHAT", "NAME", "INSTANCE-HOURS", "COST", "IDLE")
			for _, p := range r.Pools {
				t.row("pool", p.Key, fmt.Sprintf("%.3f", float64(p.BilledSeconds)/3600), money(p.Micros, p.Currency), money(p.IdleMicros, p.Currency))
			}
			for _, p := range r.Projects {
				t.row("project", p.Key, "-", money(p.Micros, p.Currency), "-")
			}
			for _, p := range r.Totals {
				t.row("idle", "-", "-", money(p.IdleMicros, p.Currency), "-")
				t.row("total", p.Currency, fmt.Sprintf("%.3f", float64(p.BilledSeconds)/3600), money(p.Micros, p.Currency), money(p.IdleMicros, p.Currency))
			}
			return t.flush()
		},
	}
	connFlags(cmd)
	cmd.Flags().Duration("since", 30*24*time.Hour, "the window: instances billed in the last this long")
	return cmd
}
