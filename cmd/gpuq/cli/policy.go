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
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"sigs.k8s.io/yaml"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/queue/store"
)

// policyService is what the policy commands need: the HTTP API (an admin
// token for all projects) or, on the control-plane host, the database.
// Both answer with the API's documents, so -o json prints the same.
type policyService interface {
	Show(ctx context.Context) (*httpapi.Policy, error)
	// Set records a policy document (YAML or JSON) as the next version;
	// with expected, only on top of that version.
	Set(ctx context.Context, doc []byte, contentType, comment string, expected *int64) (*httpapi.Policy, error)
	History(ctx context.Context, limit int) ([]httpapi.PolicyVersion, error)
	Close()
}

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Show, set and list the versions of the placement policy in effect on every server",
		Long: `policy manages the placement policy (rules, budgets, residency classes…) that every
server places with. It goes through the HTTP API when an API URL is configured
(GPUQ_URL and GPUQ_TOKEN, an admin token for all projects), else through the
database (--database-url) on the control-plane host. Until a version is set,
the servers' config file policy is in effect.`,
	}
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the policy in effect as a policy file (with -o json: the API's document)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPolicy(cmd, func(v *viper.Viper, svc policyService, format string) error {
				p, err := svc.Show(cmd.Context())
				if err != nil {
					return err
				}
				if format == "json" {
					return writeJSON(cmd.OutOrStdout(), p)
				}
				return printPolicy(cmd.OutOrStdout(), p)
			})
		},
	}
	set := &cobra.Command{
		Use:   "set FILE",
		Short: "Make a policy file the policy in effect: a new version, in effect on every server within seconds",
		Long: `set checks FILE as strictly as a policy file (an unknown key or an undefined
residency class is refused, naming the key, and nothing changes) and records it as
the next version. With --if-version it is recorded only while that version is in
effect, so that two admins do not overwrite each other's change.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPolicy(cmd, func(v *viper.Viper, svc policyService, format string) error {
				data, err := readPlanFile("policy", args[0])
				if err != nil {
					return err
				}
				expected, err := ifVersionFlag(cmd, v)
				if err != nil {
					return err
				}
				if err := commentFlag(v); err != nil {
					return err
				}
				contentType := "application/yaml"
				if configType(args[0]) == "json" {
					contentType = "application/json"
				}
				p, err := svc.Set(cmd.Context(), data, contentType, v.GetString("comment"), expected)
				var moved *versionMovedError
				if errors.As(err, &moved) {
					return err
				}
				if err != nil {
					return fmt.Errorf("policy file %s: %w", args[0], err)
				}
				if format == "json" {
					return writeJSON(cmd.OutOrStdout(), p)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "policy version %d is in effect\n", p.Version)
				return nil
			})
		},
	}
	set.Flags().String("comment", "", "why the policy changes, kept with the version")
	set.Flags().Int64("if-version", 0, "record the change only while this version is in effect (0: the config file's policy)")
	history := &cobra.Command{
		Use:   "history",
		Short: "List the policy's versions, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPolicy(cmd, func(v *viper.Viper, svc policyService, format string) error {
				limit := v.GetInt("limit")
				if limit < 1 || limit > 1000 {
					return fmt.Errorf("--limit: must be 1–1000, got %d", limit)
				}
				list, err := svc.History(cmd.Context(), limit)
				if err != nil {
					return err
				}
				if format == "json" {
					return writeJSON(cmd.OutOrStdout(), list)
				}
				t := newTable(cmd.OutOrStdout(), "VERSION", "SET AT", "SET BY", "COMMENT")
				for _, p := range list {
					by := p.SetBy
					if p.SetByName != "" {
						by = p.SetByName + " (token " + p.SetBy + ")"
					}
					t.row(p.Version, p.SetAt.Local().Format(time.DateTime), by, orDash(truncate(p.Comment, 60)))
				}
				return t.flush()
			})
		},
	}
	history.Flags().Int("limit", 100, "most versions to list")
	for _, c := range []*cobra.Command{show, set, history} {
		c.Flags().String("url", "", "gpuq HTTP API URL (env GPUQ_URL; token from GPUQ_TOKEN or the config file's token key)")
		c.Flags().String("database-url", "", "PostgreSQL URL (env GPUQ_DATABASE_URL), when there is no API URL")
		c.Flags().String("policy", "", "with the database: the servers' policy file, shown while no version was set")
	}
	cmd.AddCommand(show, set, history)
	return cmd
}

// withPolicy runs fn with the policy service the configuration selects.
func withPolicy(cmd *cobra.Command, fn func(v *viper.Viper, svc policyService, format string) error) error {
	return withAdmin(cmd, connectPolicy, fn)
}

// withAdmin reads the configuration and runs fn with the service connect
// selects, closing it afterwards.
func withAdmin[S interface{ Close() }](cmd *cobra.Command, connect func(*cobra.Command, *viper.Viper) (S, error), fn func(v *viper.Viper, svc S, format string) error) error {
	v, format, err := loadConfigFormat(cmd)
	if err != nil {
		return err
	}
	svc, err := connect(cmd, v)
	if err != nil {
		return err
	}
	defer svc.Close()
	return fn(v, svc, format)
}

// connectPolicy returns the HTTP API client when an API URL is configured
// and --database-url is not on the command line; else the database.
func connectPolicy(cmd *cobra.Command, v *viper.Viper) (policyService, error) {
	return adminService(cmd, v, func(a *apiJobs) policyService { return apiPolicy{a} }, func(s *store.Store) (policyService, error) {
		rules, err := loadRules(v)
		if err != nil {
			return nil, err
		}
		return &storePolicy{store: s, watch: &control.PolicyWatch{Store: s, Config: rules}}, nil
	})
}

// adminService is the service an admin command talks to: through the HTTP
// API when an API URL is configured and --database-url is not on the
// command line (viaHTTP), else through the database on the control-plane
// host (viaDB, which owns the store it is given once it succeeds).
func adminService[S any](cmd *cobra.Command, v *viper.Viper, viaHTTP func(*apiJobs) S, viaDB func(*store.Store) (S, error)) (S, error) {
	var none S
	if viaAPI(cmd, v) {
		a, err := newAPIJobs(v)
		if err != nil {
			return none, err
		}
		return viaHTTP(a), nil
	}
	s, err := openStore(cmd.Context(), v)
	if err != nil {
		return none, err
	}
	svc, err := viaDB(s)
	if err != nil {
		s.Close()
		return none, err
	}
	return svc, nil
}

func printPolicy(w io.Writer, p *httpapi.Policy) error {
	if p.Source == control.PolicySourceConfig {
		fmt.Fprintln(w, "# the servers' config file policy: no version has been set")
	} else {
		fmt.Fprintf(w, "# version %d, set by %s at %s\n", p.Version, p.SetBy, p.SetAt.Local().Format(time.DateTime))
		if p.Comment != "" {
			fmt.Fprintf(w, "# %s\n", p.Comment)
		}
	}
	if len(p.Rules) == 0 {
		_, err := fmt.Fprintln(w, "{}")
		return err
	}
	doc, err := json.Marshal(p.Rules)
	if err != nil {
		return err
	}
	out, err := yaml.JSONToYAML(doc)
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}

// apiPolicy manages the policy through the HTTP API.
type apiPolicy struct{ *apiJobs }

func (a apiPolicy) Show(ctx context.Context) (*httpapi.Policy, error) {
	var p httpapi.Policy
	return &p, a.call(ctx, http.MethodGet, "/v1/policy", nil, nil, "", &p)
}

func (a apiPolicy) Set(ctx context.Context, doc []byte, contentType, comment string, expected *int64) (*httpapi.Policy, error) {
	q := url.Values{}
	if comment != "" {
		q.Set("comment", comment)
	}
	var p httpapi.Policy
	err := a.call(ctx, http.MethodPut, "/v1/policy", q, bytes.NewReader(doc), contentType, &p, ifMatchHeader(expected)...)
	var ae *APIError
	if expected != nil && errors.As(err, &ae) && ae.Status == http.StatusPreconditionFailed {
		if cur, cerr := a.Show(ctx); cerr == nil {
			return nil, &versionMovedError{asked: *expected, current: cur.Version}
		}
	}
	return &p, err
}

// ifVersionFlag reads --if-version: nil when not given.
func ifVersionFlag(cmd *cobra.Command, v *viper.Viper) (*int64, error) {
	if !cmd.Flags().Changed("if-version") {
		return nil, nil
	}
	n := v.GetInt64("if-version")
	if n < 0 {
		return nil, fmt.Errorf("--if-version: must be 0 or more, got %d", n)
	}
	return &n, nil
}

// commentFlag checks --comment as the server does: one line of text.
func commentFlag(v *viper.Viper) error {
	if p := queue.TextProblem(v.GetString("comment")); p != "" {
		return errors.New("--comment: " + p)
	}
	return nil
}

// ifMatchHeader is the If-Match header that makes a change only while the
// expected policy version is in effect; none without one.
func ifMatchHeader(expected *int64) []string {
	if expected == nil {
		return nil
	}
	return []string{"If-Match", `"` + strconv.FormatInt(*expected, 10) + `"`}
}

// versionMovedError is why gpuq policy set or gpuq budget set
// --if-version changed nothing: another version is in effect. show is the
// command that shows what is (default gpuq policy show).
type versionMovedError struct {
	asked, current int64
	show           string
}

func (e *versionMovedError) Error() string {
	show := e.show
	if show == "" {
		show = "gpuq policy show"
	}
	return fmt.Sprintf("--if-version %d: version %d is in effect, so nothing was changed; see %s (and gpuq policy history), and retry with --if-version %d",
		e.asked, e.current, show, e.current)
}

func (a apiPolicy) History(ctx context.Context, limit int) ([]httpapi.PolicyVersion, error) {
	var list []httpapi.PolicyVersion
	return list, a.call(ctx, http.MethodGet, "/v1/policy/versions", url.Values{"limit": {strconv.Itoa(limit)}}, nil, "", &list)
}

// storePolicy manages the policy in the database directly, as gpuq token
// does: for the control-plane host, which holds the database credential.
type storePolicy struct {
	store *store.Store
	watch *control.PolicyWatch
}

func (s *storePolicy) Close() { s.store.Close() }

func (s *storePolicy) Show(ctx context.Context) (*httpapi.Policy, error) {
	if err := s.watch.Refresh(ctx); err != nil {
		return nil, err
	}
	return httpapi.PolicyOf(s.watch.Current())
}

func (s *storePolicy) Set(ctx context.Context, doc []byte, _, comment string, expected *int64) (*httpapi.Policy, error) {
	p, err := s.watch.SetPolicy(ctx, doc, "yaml", "cli", comment, expected)
	if errors.Is(err, queue.ErrPolicyChanged) && expected != nil {
		if rerr := s.watch.Refresh(ctx); rerr == nil {
			return nil, &versionMovedError{asked: *expected, current: s.watch.Current().Version}
		}
	}
	if errors.Is(err, queue.ErrPolicyChanged) {
		return nil, fmt.Errorf("%w: see gpuq policy show, and retry with --if-version set to its version", err)
	}
	if err != nil {
		return nil, err
	}
	return httpapi.PolicyOf(p)
}

func (s *storePolicy) History(ctx context.Context, limit int) ([]httpapi.PolicyVersion, error) {
	list, err := s.store.PolicyVersions(ctx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]httpapi.PolicyVersion, len(list))
	for i, v := range list {
		if out[i], err = httpapi.PolicyVersionOf(v); err != nil {
			return nil, err
		}
	}
	return out, nil
}
