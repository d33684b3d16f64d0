package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/store"
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
			pool := v.GetString("pool")
			if pool != "" {
				if err := queue.ValidatePool(pool); err != nil {
					return fmt.Errorf("--pool: %w", err)
				}
			}
			if v.GetBool("watch") {
				return watchInstances(cmd, v, format, pool, state)
			}
			if cmd.Flags().Changed("after") {
				return fmt.Errorf("--after: only with --watch")
			}
			var list []*queue.Instance
			if viaAPI(cmd, v) {
				q := url.Values{}
				if pool != "" {
					q.Set("pool", pool)
				}
				if state != "" {
					q.Set("state", string(state))
				}
				raw, err := getAPIDoc(cmd.Context(), v, "/v1/instances", q, &list)
				if err != nil {
					return err
				}
				if format == "json" {
					return writeRawJSON(cmd.OutOrStdout(), raw)
				}
			} else {
				c, err := dial(cmd.Context(), v, true)
				if err != nil {
					return err
				}
				defer c.Close()
				if list, err = c.store.Instances(cmd.Context(), pool, state); err != nil {
					return err
				}
				if format == "json" {
					if list == nil {
						list = []*queue.Instance{}
					}
					return writeJSON(cmd.OutOrStdout(), list)
				}
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
	apiFlag(cmd)
	cmd.Flags().String("pool", "", "only instances of this pool")
	cmd.Flags().String("state", "", "only instances in this state (requested, pending, ready, draining, terminated, preempted, failed)")
	cmd.Flags().Bool("watch", false, "follow the instances' state changes as they happen, one line each (-o json: one event document a line), until interrupted")
	cmd.Flags().Uint64("after", 0, "with --watch: first the retained events after this one (the SEQ column), then new ones")
	return cmd
}

// watchInstances prints instance events as they are announced, through the
// HTTP API or, on the control-plane host, straight from JetStream.
func watchInstances(cmd *cobra.Command, v *viper.Viper, format, pool string, state queue.InstanceState) error {
	ctx, stop := shutdownContext(cmd.Context())
	defer stop()
	out := cmd.OutOrStdout()
	if format != "json" {
		fmt.Fprintln(out, "SEQ  AT  INSTANCE  POOL  STATE  MESSAGE")
	}
	var werr error
	print := func(seq uint64, raw []byte, ev queue.InstanceEvent) bool {
		if state != "" && ev.State != state {
			return true
		}
		if format == "json" {
			_, werr = fmt.Fprintf(out, "%s\n", bytes.TrimSpace(raw))
		} else {
			_, werr = fmt.Fprintf(out, "%d  %s  %s  %s  %s  %s\n", seq, ev.At.Local().Format(time.DateTime), ev.InstanceID, ev.Pool, ev.State, printable(orDash(ev.Message)))
		}
		return werr == nil
	}
	after := v.GetUint64("after")
	var err error
	if viaAPI(cmd, v) {
		a, aerr := newAPIJobs(v)
		if aerr != nil {
			return aerr
		}
		defer a.Close()
		err = a.InstanceEvents(ctx, pool, after, print)
	} else {
		c, derr := dial(ctx, v, false)
		if derr != nil {
			return derr
		}
		defer c.Close()
		err = queue.FollowInstanceEvents(ctx, c.js, pool, after, print)
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		err = nil // interrupted: the normal end of a watch
	}
	return errors.Join(err, werr)
}

func newSpendCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "spend",
		Short: "What the rented instances cost, per pool and project; with --project, the project's budget ledger",
		Long: `spend prices every instance billed in the window from its billed time (rounded up to the
second or hour its provider bills by) at its price, and attributes it to the jobs that ran on it:
an attempt's share is the price over its run time divided by the instance's slots. What no job
used is idle.

With --project it shows that project's budget ledger instead: what is left of each budget of
the policy in effect that applies to the project, in the budget's current period; what its jobs
accrued and still reserve per currency; and each job's estimate against what it accrued, summed
per provider and region (-o json: the HTTP API's GET /v1/projects/{project}/spend document).`,
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
			now := time.Now()
			since, err := sinceFlag(v.GetString("since"), now)
			if err != nil {
				return err
			}
			project := v.GetString("project")
			if len(project) > 63 {
				return fmt.Errorf("--project: at most 63 characters, got %d", len(project))
			}
			var l *control.Ledger
			var r *control.SpendReport
			if viaAPI(cmd, v) {
				q := url.Values{"since": {since.UTC().Format(time.RFC3339Nano)}}
				var raw []byte
				if project != "" {
					raw, err = getAPIDoc(cmd.Context(), v, "/v1/projects/"+url.PathEscape(project)+"/spend", q, &l)
					err = projectNotFound(project, err)
				} else {
					raw, err = getAPIDoc(cmd.Context(), v, "/v1/spend", q, &r)
				}
				if err != nil {
					return err
				}
				if format == "json" {
					return writeRawJSON(cmd.OutOrStdout(), raw)
				}
			} else {
				c, err := dial(cmd.Context(), v, true)
				if err != nil {
					return err
				}
				defer c.Close()
				if project != "" {
					l, err = projectLedger(cmd.Context(), v, c.store, project, since, now)
				} else {
					r, err = control.Spend(cmd.Context(), c.store, since, now)
				}
				if err != nil {
					return err
				}
				if format == "json" && l != nil {
					return writeJSON(cmd.OutOrStdout(), l)
				}
				if format == "json" {
					return writeJSON(cmd.OutOrStdout(), r)
				}
			}
			if l != nil {
				return writeLedger(cmd.OutOrStdout(), l)
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
	apiFlag(cmd)
	cmd.Flags().String("since", "720h", "the window: the last this long (720h), or since a time (RFC 3339)")
	cmd.Flags().String("project", "", "show this project's budget ledger: per job and per provider and region, estimated vs accrued")
	return cmd
}

// projectLedger reads a project's ledger from the database, with the
// budgets of the policy in effect (the latest stored version, else the
// config file's) that apply to it.
func projectLedger(ctx context.Context, v *viper.Viper, s *store.Store, project string, since, now time.Time) (*control.Ledger, error) {
	rules, err := loadRules(v)
	if err != nil {
		return nil, err
	}
	watch := &control.PolicyWatch{Store: s, Config: rules}
	if err := watch.Refresh(ctx); err != nil {
		return nil, err
	}
	l, err := control.ProjectLedger(ctx, s, project, since)
	if err != nil {
		return nil, err
	}
	if l.Budgets, err = control.BudgetUsages(ctx, s, project, watch.Current().Rules, now); err != nil {
		return nil, err
	}
	return l, nil
}

// sinceFlag reads --since: a positive duration back from now, or an RFC
// 3339 time.
func sinceFlag(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("--since: must be a positive duration such as 24h, got %s", d)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since: want a duration such as 24h or a time such as 2026-01-02T15:04:05Z, got %q", s)
	}
	return t, nil
}

// writeLedger prints a project's budget ledger as tables.
func writeLedger(w io.Writer, l *control.Ledger) error {
	money := func(micros int64, cur string) string {
		if cur == "" {
			return "-"
		}
		return policy.Money{Micros: micros, Currency: cur}.String()
	}
	fmt.Fprintf(w, "project %s since %s\n\n", l.Project, l.Since.UTC().Format(time.RFC3339))
	if len(l.Budgets) > 0 {
		// What a team asks first: how much of each budget is left.
		if err := writeBudgetUsage(w, l.Budgets); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	t := newTable(w, "CURRENCY", "ACCRUED", "RESERVED")
	for _, a := range l.Amounts {
		t.row(a.Currency, money(a.Micros, a.Currency), money(a.ReservedMicros, a.Currency))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	t = newTable(w, "PROVIDER", "REGION", "JOBS", "ESTIMATED", "ACCRUED", "RESERVED")
	for _, p := range l.Places {
		t.row(orDash(p.Provider), orDash(p.Region), p.Jobs, money(p.EstimatedMicros, p.Currency), money(p.AccruedMicros, p.Currency), money(p.ReservedMicros, p.Currency))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	t = newTable(w, "JOB", "NAME", "STATE", "PROVIDER", "REGION", "ESTIMATED", "ACCRUED", "RESERVED")
	for _, j := range l.Jobs {
		t.row(j.JobID, j.Name, j.State, orDash(j.Provider), orDash(j.Region), money(j.EstimatedMicros, j.Currency), money(j.AccruedMicros, j.Currency), money(j.ReservedMicros, j.Currency))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if l.Truncated {
		fmt.Fprintf(w, "(the %d newest jobs; the totals count them all)\n", control.LedgerJobs)
	}
	return nil
}
