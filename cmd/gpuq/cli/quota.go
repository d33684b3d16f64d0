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
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/store"
)

// quotaService is what the quota commands need: the HTTP API or, on the
// control-plane host, the database. Both answer with the API's document.
type quotaService interface {
	Show(ctx context.Context, project string) (*queue.ProjectQuota, error)
	// Set sets the project's quota in place of the config file's; 0 is no
	// quota.
	Set(ctx context.Context, project string, bytes int64) (*queue.ProjectQuota, error)
	// Clear removes the quota an admin set, so that the config file's
	// holds again.
	Clear(ctx context.Context, project string) (*queue.ProjectQuota, error)
	Close()
}

func newQuotaCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Show what a project stores against its storage quota, and set or clear the quota (an admin for all projects)",
		Long: `quota shows and sets a project's storage quota: the bytes its checkpoints and
results may take in the archive stores. A checkpoint that would take the project
past it is refused (gpuq checkpoint save fails naming the quota). The quota in
effect is the one an admin set here, else the servers' config file's
(storage.project_quotas, storage.project_quota).

It goes through the HTTP API when an API URL is configured (GPUQ_URL and
GPUQ_TOKEN), else through the database (--database-url) on the control-plane
host, where the config file's storage settings give the default.`,
	}
	show := &cobra.Command{
		Use:     "show",
		Short:   "The project's quota in effect, where it comes from, and what the project stores now (any admin token of the project)",
		Example: "  gpuq quota show --project vision",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withQuota(cmd, func(svc quotaService, project, format string) error {
				q, err := svc.Show(cmd.Context(), project)
				if err != nil {
					return err
				}
				return printQuota(cmd.OutOrStdout(), q, format)
			})
		},
	}
	set := &cobra.Command{
		Use:   "set SIZE",
		Short: "Set the project's quota in place of the config file's, at once on every server (0: no quota)",
		Long: `set makes SIZE (such as 200GiB or 500MB; 0 for no quota) the project's quota on
every server at once, in place of the config file's. What the project stores
already is kept; a checkpoint that would pass the quota is refused.`,
		Example: `  gpuq quota set --project vision 200GiB
  gpuq quota set --project vision 0`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "" {
				return errors.New("SIZE: want a size such as 200GiB or 500MB, or 0 for no quota")
			}
			size, err := parseSize("SIZE", args[0])
			if err != nil {
				return err
			}
			return withQuota(cmd, func(svc quotaService, project, format string) error {
				q, err := svc.Set(cmd.Context(), project, size)
				if err != nil {
					return err
				}
				return printQuota(cmd.OutOrStdout(), q, format)
			})
		},
	}
	clear := &cobra.Command{
		Use:   "clear",
		Short: "Remove the quota an admin set, so that the config file's holds again",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withQuota(cmd, func(svc quotaService, project, format string) error {
				q, err := svc.Clear(cmd.Context(), project)
				if err != nil {
					return err
				}
				return printQuota(cmd.OutOrStdout(), q, format)
			})
		},
	}
	for _, c := range []*cobra.Command{show, set, clear} {
		c.Flags().String("project", "", "the project (required)")
		c.Flags().String("url", "", "gpuq HTTP API URL (env GPUQ_URL; token from GPUQ_TOKEN or the config file's token key)")
		c.Flags().String("database-url", "", "PostgreSQL URL (env GPUQ_DATABASE_URL), when there is no API URL")
	}
	cmd.AddCommand(show, set, clear)
	return cmd
}

// withQuota runs fn with --project and the quota service.
func withQuota(cmd *cobra.Command, fn func(svc quotaService, project, format string) error) error {
	project, err := requiredProject(cmd, "the project whose storage quota to show or set")
	if err != nil {
		return err
	}
	return withAdmin(cmd, connectQuota, func(_ *viper.Viper, svc quotaService, format string) error { return fn(svc, project, format) })
}

// requiredProject reads the required --project of an admin command.
func requiredProject(cmd *cobra.Command, what string) (string, error) {
	project, _ := cmd.Flags().GetString("project")
	if project == "" {
		return "", errors.New("--project: required: " + what)
	}
	if err := queue.ValidateProject(project); err != nil {
		return "", fmt.Errorf("--project: %w", err)
	}
	return project, nil
}

func connectQuota(cmd *cobra.Command, v *viper.Viper) (quotaService, error) {
	return adminService(cmd, v, func(a *apiJobs) quotaService { return apiQuota{a} }, func(s *store.Store) (quotaService, error) {
		storage, err := storageConfig(v)
		if err != nil {
			return nil, err
		}
		s.Storage = storage
		return storeQuota{s}, nil
	})
}

// printQuota prints a project's quota, or the API's document with -o json.
func printQuota(w io.Writer, q *queue.ProjectQuota, format string) error {
	if format == "json" {
		return writeJSON(w, q)
	}
	size := func(n int64) string { return humanize.IBytes(uint64(n)) }
	fmt.Fprintf(w, "project  %s\n", q.Project)
	switch {
	case q.Bytes == 0 && q.Source == "config":
		fmt.Fprintln(w, "quota    none (the servers' config file sets none)")
	case q.Bytes == 0:
		fmt.Fprintln(w, "quota    none (set by an admin)")
	case q.Source == "config":
		fmt.Fprintf(w, "quota    %s (%d bytes; the servers' config file)\n", size(q.Bytes), q.Bytes)
	default:
		fmt.Fprintf(w, "quota    %s (%d bytes; set by an admin)\n", size(q.Bytes), q.Bytes)
	}
	if q.SetAt != nil {
		fmt.Fprintf(w, "set      %s by %s\n", q.SetAt.Local().Format(time.DateTime), orDash(q.SetBy))
	}
	fmt.Fprintf(w, "stored   %s (%d bytes)", size(q.Stored), q.Stored)
	if q.Bytes > 0 {
		fmt.Fprintf(w, ", %.1f%% of the quota", 100*float64(q.Stored)/float64(q.Bytes))
	}
	_, err := fmt.Fprintln(w)
	return err
}

// apiQuota manages quotas through the HTTP API.
type apiQuota struct{ *apiJobs }

func quotaPath(project string) string { return "/v1/projects/" + url.PathEscape(project) + "/quota" }

func (a apiQuota) Show(ctx context.Context, project string) (*queue.ProjectQuota, error) {
	var q queue.ProjectQuota
	return &q, projectNotFound(project, a.call(ctx, http.MethodGet, quotaPath(project), nil, nil, "", &q))
}

func (a apiQuota) Set(ctx context.Context, project string, size int64) (*queue.ProjectQuota, error) {
	body, err := json.Marshal(map[string]int64{"quota_bytes": size})
	if err != nil {
		return nil, err
	}
	var q queue.ProjectQuota
	return &q, projectNotFound(project, a.call(ctx, http.MethodPut, quotaPath(project), nil, bytes.NewReader(body), "application/json", &q))
}

func (a apiQuota) Clear(ctx context.Context, project string) (*queue.ProjectQuota, error) {
	var q queue.ProjectQuota
	err := a.call(ctx, http.MethodDelete, quotaPath(project), nil, nil, "", &q)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return nil, &ExitError{Code: ExitNotFound, Err: errors.New(ae.Detail)}
	}
	return &q, err
}

// storeQuota manages quotas in the database directly, on the
// control-plane host.
type storeQuota struct{ s *store.Store }

func (q storeQuota) Close() { q.s.Close() }

func (q storeQuota) Show(ctx context.Context, project string) (*queue.ProjectQuota, error) {
	return q.s.ProjectQuota(ctx, project)
}

func (q storeQuota) Set(ctx context.Context, project string, size int64) (*queue.ProjectQuota, error) {
	if err := q.s.SetProjectQuota(ctx, project, size, "cli"); err != nil {
		return nil, err
	}
	return q.s.ProjectQuota(ctx, project)
}

func (q storeQuota) Clear(ctx context.Context, project string) (*queue.ProjectQuota, error) {
	err := q.s.ClearProjectQuota(ctx, project)
	if errors.Is(err, queue.ErrNotFound) {
		return nil, &ExitError{Code: ExitNotFound, Err: fmt.Errorf("project %s has no quota set by an admin", project)}
	}
	if err != nil {
		return nil, err
	}
	return q.s.ProjectQuota(ctx, project)
}
