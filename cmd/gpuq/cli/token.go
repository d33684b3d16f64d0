package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/queue/store"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke HTTP API tokens (through the HTTP API with an admin token, or the database)",
	}
	create := &cobra.Command{
		Use:   "create --project P --role read|submit|admin [--expires 720h|2026-12-31T00:00:00Z]",
		Short: "Create a token and print it; it is shown this once (only its hash is kept)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, format, err := loadConfigFormat(cmd)
			if err != nil {
				return err
			}
			role, err := queue.ParseRole(v.GetString("role"))
			if err != nil {
				return fmt.Errorf("--%w", err)
			}
			expires, err := parseExpiry(v.GetString("expires"), time.Now())
			if err != nil {
				return err
			}
			// Checked here, so that a mistake names the flag at fault.
			secret, t, err := queue.NewTokenSecret(v.GetString("name"), v.GetStringSlice("project"), role, expires)
			if err != nil {
				return fmt.Errorf("--%w", err)
			}
			var rec *queue.Token
			if viaAPI(cmd, v) {
				a, err := newAPIJobs(v)
				if err != nil {
					return err
				}
				defer a.Close()
				var created httpapi.CreatedToken
				raw, err := a.raw(cmd.Context(), http.MethodPost, "/v1/tokens", nil,
					httpapi.NewToken{Name: t.Name, Projects: t.Projects, Role: t.Role, ExpiresAt: t.ExpiresAt})
				if err == nil {
					err = json.Unmarshal(raw, &created)
				}
				if err != nil {
					return err
				}
				if format == "json" {
					return writeRawJSON(cmd.OutOrStdout(), raw)
				}
				secret, rec = created.Token, created.Record
			} else {
				s, err := openStore(cmd.Context(), v)
				if err != nil {
					return err
				}
				defer s.Close()
				if rec, err = s.CreateToken(cmd.Context(), t); err != nil {
					return err
				}
				if format == "json" {
					return writeJSON(cmd.OutOrStdout(), httpapi.CreatedToken{Token: secret, Record: rec})
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), secret)
			fmt.Fprintf(cmd.ErrOrStderr(), "token %s (%s on %s) created; it is not shown again\n", rec.ID, rec.Role, strings.Join(rec.Projects, ", "))
			return nil
		},
	}
	connFlags(create)
	apiFlag(create)
	create.Flags().StringSlice("project", nil, "project the token may act on (repeat for several)")
	create.Flags().String("role", "", "read, submit or admin")
	create.Flags().String("expires", "", "when the token stops working: a duration from now (720h) or an RFC 3339 time; default never")
	create.Flags().String("name", "", "a name to recognise the token by")

	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List tokens without their secrets",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, format, err := loadConfigFormat(cmd)
			if err != nil {
				return err
			}
			project := v.GetString("project")
			if len(project) > 63 {
				return fmt.Errorf("--project: at most 63 characters, got %d", len(project))
			}
			var list []*queue.Token
			if viaAPI(cmd, v) {
				q := url.Values{}
				if project != "" {
					q.Set("project", project)
				}
				raw, err := getAPIDoc(cmd.Context(), v, "/v1/tokens", q, &list)
				if err != nil {
					return projectNotFound(project, err)
				}
				if format == "json" {
					return writeRawJSON(cmd.OutOrStdout(), raw)
				}
			} else {
				s, err := openStore(cmd.Context(), v)
				if err != nil {
					return err
				}
				defer s.Close()
				var projects []string
				if project != "" {
					projects = []string{project}
				}
				if list, err = s.Tokens(cmd.Context(), projects); err != nil {
					return err
				}
				if format == "json" {
					return writeJSON(cmd.OutOrStdout(), list)
				}
			}
			t := newTable(cmd.OutOrStdout(), "ID", "PREFIX", "NAME", "ROLE", "PROJECTS", "CREATED", "EXPIRES", "LAST USED", "REVOKED")
			for _, tok := range list {
				t.row(tok.ID, tok.Prefix, orDash(tok.Name), tok.Role, strings.Join(tok.Projects, ","), tok.CreatedAt.Format(time.DateTime),
					timeOrDash(tok.ExpiresAt), timeOrDash(tok.LastUsedAt), timeOrDash(tok.RevokedAt))
			}
			return t.flush()
		},
	}
	connFlags(ls)
	apiFlag(ls)
	ls.Flags().String("project", "", "only tokens of this project")

	revoke := &cobra.Command{
		Use:   "revoke TOKEN_ID",
		Short: "Revoke a token; requests with it get 401 from then on",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, format, err := loadConfigFormat(cmd)
			if err != nil {
				return err
			}
			id, err := uuid.Parse(args[0])
			if err != nil {
				return fmt.Errorf("token id %q: not a token id (the ID column of gpuq token ls)", args[0])
			}
			if viaAPI(cmd, v) {
				a, err := newAPIJobs(v)
				if err != nil {
					return err
				}
				defer a.Close()
				resp, err := a.do(cmd.Context(), http.MethodDelete, "/v1/tokens/"+id.String(), nil, nil, "", "application/json")
				if err != nil {
					return tokenNotFound(id.String(), err)
				}
				resp.Body.Close()
			} else {
				s, err := openStore(cmd.Context(), v)
				if err != nil {
					return err
				}
				defer s.Close()
				if err := s.RevokeToken(cmd.Context(), id, nil); err != nil {
					return tokenNotFound(id.String(), err)
				}
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"id": id, "revoked": true})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s revoked\n", id)
			return nil
		},
	}
	connFlags(revoke)
	apiFlag(revoke)
	cmd.AddCommand(create, ls, revoke)
	return cmd
}

// parseExpiry reads --expires: empty for never, a duration from now, or a
// time.
func parseExpiry(s string, now time.Time) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return nil, fmt.Errorf("--expires: must be in the future, got %s", s)
		}
		t := now.Add(d).UTC()
		return &t, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return nil, fmt.Errorf("--expires: want a duration such as 720h or an RFC 3339 time, got %q", s)
	}
	return &t, nil
}

func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.DateTime)
}

// openStore opens the system of record at --database-url.
func openStore(ctx context.Context, v *viper.Viper) (*store.Store, error) {
	url, err := required(v, "database-url")
	if err != nil {
		return nil, err
	}
	s, err := store.Open(ctx, url)
	return s, redactErr(err, url)
}
