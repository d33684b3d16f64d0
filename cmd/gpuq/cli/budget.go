package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/queue/store"
)

// budgetPeriods are the periods a budget may have, in the order gpuq
// budget set takes them as flags.
var budgetPeriods = []string{"day", "week", "month", "quarter", "year", "total"}

// budgetService is what the budget commands need: the HTTP API (an admin
// token of the project) or, on the control-plane host, the database. Both
// answer with the API's document, so -o json prints the same.
type budgetService interface {
	Show(ctx context.Context, project string) (*httpapi.ProjectBudgets, error)
	// Set replaces the budgets naming exactly project; with expected,
	// only while that policy version is in effect.
	Set(ctx context.Context, project string, budgets []httpapi.BudgetEntry, comment string, expected *int64) (*httpapi.ProjectBudgets, error)
	Close()
}

func newBudgetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "budget",
		Short: "Show a project's budgets and what is left of them, and set them (a project's admin)",
		Long: `budget shows and sets a project's budgets: the budgets entries of the placement
policy that name the project. A project's admin token may set them; budgets over
globs (med-*) and the rest of the policy belong to gpuq policy set. Setting them
records a new policy version, in effect on every server within seconds.

It goes through the HTTP API when an API URL is configured (GPUQ_URL and
GPUQ_TOKEN), else through the database (--database-url) on the control-plane
host.`,
	}
	show := &cobra.Command{
		Use:   "show",
		Short: "Every budget that applies to the project, with what it spent, reserves and has left in the current period",
		Example: `  gpuq budget show --project vision
  gpuq budget show --project vision -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withBudgets(cmd, func(v *viper.Viper, svc budgetService, project, format string) error {
				b, err := svc.Show(cmd.Context(), project)
				if err != nil {
					return err
				}
				return printBudgets(cmd.OutOrStdout(), b, format)
			})
		},
	}
	set := &cobra.Command{
		Use:   "set",
		Short: "Replace the project's own budgets, one cap per period: a new policy version",
		Long: `set replaces the budgets naming exactly the project with one cap per period
given (--month "500 EUR" --total "5000 EUR"), or removes them all with --none.
Placement rejects a job whose estimate the project's remaining budget cannot
hold, and a running job that takes the project past a cap is stopped with its
final checkpoint (README "Budgets and storage").`,
		Example: `  gpuq budget set --project vision --month "500 EUR"
  gpuq budget set --project vision --month "500 EUR" --total "5000 EUR" --comment "Q1 grant"
  gpuq budget set --project vision --none`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var entries []httpapi.BudgetEntry
			for _, period := range budgetPeriods {
				raw, _ := cmd.Flags().GetString(period)
				if !cmd.Flags().Changed(period) {
					continue
				}
				m, err := policy.ParseMoney(raw)
				if err != nil {
					return fmt.Errorf("--%s: %w", period, err)
				}
				if m.Micros < 0 {
					return fmt.Errorf("--%s: must not be negative, got %s", period, m)
				}
				entries = append(entries, httpapi.BudgetEntry{Cap: m.String(), Period: period})
			}
			none, _ := cmd.Flags().GetBool("none")
			switch {
			case none && len(entries) > 0:
				return errors.New("--none removes every budget of the project: give it without --day, --week, --month, --quarter, --year or --total")
			case !none && len(entries) == 0:
				return errors.New("give a cap for at least one period (--day, --week, --month, --quarter, --year, --total), such as --month \"500 EUR\", or --none to remove the project's budgets")
			}
			return withBudgets(cmd, func(v *viper.Viper, svc budgetService, project, format string) error {
				expected, err := ifVersionFlag(cmd, v)
				if err != nil {
					return err
				}
				if err := commentFlag(v); err != nil {
					return err
				}
				b, err := svc.Set(cmd.Context(), project, entries, v.GetString("comment"), expected)
				if err != nil {
					return err
				}
				if format != "json" {
					fmt.Fprintf(cmd.OutOrStdout(), "policy version %d is in effect\n", b.Version)
				}
				return printBudgets(cmd.OutOrStdout(), b, format)
			})
		},
	}
	for _, period := range budgetPeriods {
		set.Flags().String(period, "", "the most the project may spend each "+period+", such as \"500 EUR\"")
	}
	set.Flags().Lookup("total").Usage = "the most the project may spend in all, such as \"5000 EUR\""
	set.Flags().Bool("none", false, "remove every budget naming the project")
	set.Flags().String("comment", "", "why the budgets change, kept with the policy version")
	set.Flags().Int64("if-version", 0, "record the change only while this policy version is in effect")
	for _, c := range []*cobra.Command{show, set} {
		c.Flags().String("project", "", "the project (required)")
		c.Flags().String("url", "", "gpuq HTTP API URL (env GPUQ_URL; token from GPUQ_TOKEN or the config file's token key)")
		c.Flags().String("database-url", "", "PostgreSQL URL (env GPUQ_DATABASE_URL), when there is no API URL")
		c.Flags().String("policy", "", "with the database: the servers' policy file, in effect while no version was set")
	}
	cmd.AddCommand(show, set)
	return cmd
}

// withBudgets runs fn with --project and the budget service.
func withBudgets(cmd *cobra.Command, fn func(v *viper.Viper, svc budgetService, project, format string) error) error {
	project, err := requiredProject(cmd, "the project whose budgets to show or set")
	if err != nil {
		return err
	}
	return withAdmin(cmd, connectBudgets, func(v *viper.Viper, svc budgetService, format string) error { return fn(v, svc, project, format) })
}

func connectBudgets(cmd *cobra.Command, v *viper.Viper) (budgetService, error) {
	return adminService(cmd, v, func(a *apiJobs) budgetService { return apiBudgets{a} }, func(s *store.Store) (budgetService, error) {
		rules, err := loadRules(v)
		if err != nil {
			return nil, err
		}
		return &storeBudgets{store: s, watch: &control.PolicyWatch{Store: s, Config: rules}}, nil
	})
}

// printBudgets prints a project's budgets as a table, or the API's
// document with -o json.
func printBudgets(w io.Writer, b *httpapi.ProjectBudgets, format string) error {
	if format == "json" {
		return writeJSON(w, b)
	}
	if len(b.Usage) == 0 {
		_, err := fmt.Fprintf(w, "no budget applies to project %s (policy version %d)\n", b.Project, b.Version)
		return err
	}
	fmt.Fprintf(w, "project %s, policy version %d\n\n", b.Project, b.Version)
	return writeBudgetUsage(w, b.Usage)
}

// writeBudgetUsage prints budgets with what is left of each.
func writeBudgetUsage(w io.Writer, usage []control.BudgetUsage) error {
	t := newTable(w, "BUDGET", "PERIOD", "SINCE", "CAP", "SPENT", "RESERVED", "REMAINING")
	for _, b := range usage {
		start := "-"
		if !b.PeriodStart.IsZero() {
			start = b.PeriodStart.UTC().Format(time.DateOnly)
		}
		t.row(b.Budget, b.Period, start, b.Cap, b.Spent, b.Reserved, b.Remaining)
	}
	return t.flush()
}

// apiBudgets manages a project's budgets through the HTTP API.
type apiBudgets struct{ *apiJobs }

func budgetsPath(project string) string {
	return "/v1/projects/" + url.PathEscape(project) + "/budgets"
}

func (a apiBudgets) Show(ctx context.Context, project string) (*httpapi.ProjectBudgets, error) {
	var b httpapi.ProjectBudgets
	return &b, projectNotFound(project, a.call(ctx, http.MethodGet, budgetsPath(project), nil, nil, "", &b))
}

func (a apiBudgets) Set(ctx context.Context, project string, budgets []httpapi.BudgetEntry, comment string, expected *int64) (*httpapi.ProjectBudgets, error) {
	body, err := json.Marshal(map[string]any{"budgets": budgets})
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	if comment != "" {
		q.Set("comment", comment)
	}
	var b httpapi.ProjectBudgets
	err = a.call(ctx, http.MethodPut, budgetsPath(project), q, bytes.NewReader(body), "application/json", &b, ifMatchHeader(expected)...)
	var ae *APIError
	if expected != nil && errors.As(err, &ae) && ae.Status == http.StatusPreconditionFailed {
		if cur, cerr := a.Show(ctx, project); cerr == nil {
			return nil, &versionMovedError{asked: *expected, current: cur.Version, show: "gpuq budget show --project " + project}
		}
	}
	if errors.As(err, &ae) && ae.Status == http.StatusUnprocessableEntity {
		// Name the flag that gave the cap, not the request's field.
		for i, e := range budgets {
			field := "body.budgets[" + strconv.Itoa(i) + "].cap"
			ae.Detail = strings.ReplaceAll(ae.Detail, field, "--"+e.Period)
			for j := range ae.Errors {
				if ae.Errors[j].Location == field {
					ae.Errors[j].Location = "--" + e.Period
				}
			}
		}
	}
	return &b, projectNotFound(project, err)
}

// storeBudgets manages a project's budgets in the database directly, as
// gpuq policy does on the control-plane host.
type storeBudgets struct {
	store *store.Store
	watch *control.PolicyWatch
}

func (s *storeBudgets) Close() { s.store.Close() }

func (s *storeBudgets) Show(ctx context.Context, project string) (*httpapi.ProjectBudgets, error) {
	if err := s.watch.Refresh(ctx); err != nil {
		return nil, err
	}
	return httpapi.ProjectBudgetsOf(ctx, s.store, project, s.watch.Current())
}

func (s *storeBudgets) Set(ctx context.Context, project string, budgets []httpapi.BudgetEntry, comment string, expected *int64) (*httpapi.ProjectBudgets, error) {
	if err := s.watch.Refresh(ctx); err != nil {
		return nil, err
	}
	mine := make([]policy.Budget, len(budgets))
	for i, b := range budgets {
		m, err := policy.ParseMoney(b.Cap)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", b.Period, err)
		}
		mine[i] = policy.Budget{Project: project, Period: b.Period, Cap: m}
	}
	p, err := s.watch.SetProjectBudgets(ctx, project, mine, "cli", comment, expected)
	if errors.Is(err, queue.ErrPolicyChanged) && expected != nil {
		if rerr := s.watch.Refresh(ctx); rerr == nil {
			return nil, &versionMovedError{asked: *expected, current: s.watch.Current().Version, show: "gpuq budget show --project " + project}
		}
	}
	if err != nil {
		return nil, err
	}
	return httpapi.ProjectBudgetsOf(ctx, s.store, project, p)
}
