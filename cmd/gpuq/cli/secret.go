package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"golang.org/x/term"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/queue/store"
)

// secretService is what the secret commands need: the HTTP API or, on the
// control-plane host, the database.
type secretService interface {
	Set(ctx context.Context, project, name, value string) (*queue.Secret, error)
	List(ctx context.Context, project string) (*httpapi.Secrets, error)
	Delete(ctx context.Context, project, name string) error
	TestWebhook(ctx context.Context, project, name string) (*queue.WebhookTest, error)
	Close()
}

func newSecretCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Set, list and delete a project's secrets: values its jobs name in their spec's secrets",
		Long: `secret keeps values such as an API key or a token on the control plane for a
project's jobs. A job whose spec names one (secrets: [WANDB_API_KEY]) finds its
value in the environment variable of that name; the value is masked in the
job's logs and never shown: not by gpuq status, the job's events or this
command. Setting and deleting need an admin token of the project; listing, any
token of it.

It goes through the HTTP API when an API URL is configured (GPUQ_URL and
GPUQ_TOKEN, or gpuq dev's directory), else through the database
(--database-url) on the control-plane host.`,
	}
	set := &cobra.Command{
		Use:   "set NAME",
		Short: "Set a secret from standard input (or --from-file), replacing its value if it is set",
		Long: `set reads the value from standard input (one trailing newline is dropped), or
asks for it without echoing it when standard input is a terminal, or reads
the file --from-file names as it is. The value is never taken from the
command line, where other users of the machine could read it.`,
		Example: `  gpuq secret set --project vision WANDB_API_KEY            # asks for it
  printenv HF_TOKEN | gpuq secret set --project vision HF_TOKEN
  gpuq secret set --project vision GCP_KEY --from-file key.json`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := queue.ValidateSecretName(name); err != nil {
				return fmt.Errorf("NAME: %w", err)
			}
			file, _ := cmd.Flags().GetString("from-file")
			value, err := readSecretValue(cmd, name, file)
			if err != nil {
				return err
			}
			if err := queue.ValidateSecretValue(value); err != nil {
				return fmt.Errorf("the value of %s: %w", name, err)
			}
			return withSecrets(cmd, func(svc secretService, project, format string) error {
				sec, err := svc.Set(cmd.Context(), project, name, value)
				if err != nil {
					return err
				}
				if format == "json" {
					return writeJSON(cmd.OutOrStdout(), sec)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "secret %s of project %s set; a job names it with secrets: [%s]\n", sec.Name, sec.Project, sec.Name)
				return err
			})
		},
	}
	set.Flags().String("from-file", "", "read the value from this file, as it is")
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List a project's secrets: names, who set each and when; never values",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withSecrets(cmd, func(svc secretService, project, format string) error {
				list, err := svc.List(cmd.Context(), project)
				if err != nil {
					return err
				}
				if format == "json" {
					return writeJSON(cmd.OutOrStdout(), list)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tSET\tBY")
				for _, s := range list.Secrets {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, s.SetAt.Local().Format(time.DateTime), printable(s.SetBy))
				}
				return tw.Flush()
			})
		},
	}
	rm := &cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"delete"},
		Short:   "Delete a secret; a job naming it that has not started yet fails without running",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			return withSecretNamed(cmd, name, func(svc secretService, project, format string) error {
				if err := svc.Delete(cmd.Context(), project, name); err != nil {
					return err
				}
				if format == "json" {
					return writeJSON(cmd.OutOrStdout(), map[string]string{"project": project, "name": name})
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "secret %s of project %s deleted\n", name, project)
				return err
			})
		},
	}
	testHook := &cobra.Command{
		Use:   "test-webhook NAME",
		Short: "Post a test message to the webhook secret NAME holds, as a job's end would be posted, and say how it went",
		Long: `test-webhook has the server post a test message to the webhook whose URL the
secret holds, from where and as it posts the ends of jobs naming it in
notify.webhook (the same addresses allowed, the same timeout, no redirect
followed), once: a URL set wrong shows now rather than when a long job ends.
It exits 1 when the post fails, saying why; neither says the URL, only its
host. Any token of the project that may submit jobs may ask for it.`,
		Example: `  printenv SLACK_WEBHOOK_URL | gpuq secret set SLACK_HOOK
  gpuq secret test-webhook SLACK_HOOK`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			return withSecretNamed(cmd, name, func(svc secretService, project, format string) error {
				res, err := svc.TestWebhook(cmd.Context(), project, name)
				if err != nil {
					return err
				}
				if format == "json" {
					if err := writeJSON(cmd.OutOrStdout(), res); err != nil {
						return err
					}
				} else if res.Delivered {
					_, err := fmt.Fprintf(cmd.OutOrStdout(), "posted a test message to %s, the webhook in secret %s of project %s: HTTP %d\n", res.Host, name, project, res.HTTPStatus)
					return err
				}
				if !res.Delivered {
					return fmt.Errorf("the test post to the webhook in secret %s of project %s failed: %s", name, project, printable(res.Error))
				}
				return nil
			})
		},
	}
	for _, c := range []*cobra.Command{set, ls, rm, testHook} {
		c.Flags().String("project", queue.DefaultProject, "the project")
		c.Flags().String("url", "", "gpuq HTTP API URL (env GPUQ_URL; token from GPUQ_TOKEN or the config file's token key)")
		c.Flags().String("database-url", "", "PostgreSQL URL (env GPUQ_DATABASE_URL), when there is no API URL")
	}
	cmd.AddCommand(set, ls, rm, testHook)
	return cmd
}

// readSecretValue reads a secret's value: from file as it is, else from
// standard input, asking for it without echo on a terminal.
func readSecretValue(cmd *cobra.Command, name, file string) (string, error) {
	if file != "" {
		data, err := readBounded(file, queue.MaxSecretBytes)
		if err != nil {
			return "", fmt.Errorf("--from-file: %w", err)
		}
		return string(data), nil
	}
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(cmd.ErrOrStderr(), "value of %s (not echoed): ", name)
		data, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(cmd.ErrOrStderr())
		if err != nil {
			return "", fmt.Errorf("reading the value of %s: %w", name, err)
		}
		return string(data), nil
	}
	data, err := io.ReadAll(io.LimitReader(in, queue.MaxSecretBytes+3))
	if err != nil {
		return "", fmt.Errorf("reading the value of %s from standard input: %w", name, err)
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
	if v == "" {
		return "", fmt.Errorf("the value of %s: standard input is empty: pipe the value in (printenv %s | gpuq secret set %s) or give --from-file", name, name, name)
	}
	return v, nil
}

// readBounded reads a file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: over %d bytes, more than a secret may hold", path, limit)
	}
	return data, nil
}

// withSecretNamed runs fn as withSecrets does, once name is checked as
// the NAME argument.
func withSecretNamed(cmd *cobra.Command, name string, fn func(svc secretService, project, format string) error) error {
	if err := queue.ValidateSecretName(name); err != nil {
		return fmt.Errorf("NAME: %w", err)
	}
	return withSecrets(cmd, fn)
}

// withSecrets runs fn with --project and the secret service.
func withSecrets(cmd *cobra.Command, fn func(svc secretService, project, format string) error) error {
	project, _ := cmd.Flags().GetString("project")
	if err := queue.ValidateProject(project); err != nil {
		return fmt.Errorf("--project: %w", err)
	}
	return withAdmin(cmd, connectSecrets, func(_ *viper.Viper, svc secretService, format string) error { return fn(svc, project, format) })
}

func connectSecrets(cmd *cobra.Command, v *viper.Viper) (secretService, error) {
	return adminService(cmd, v, func(a *apiJobs) secretService { return apiSecrets{a} }, func(s *store.Store) (secretService, error) {
		sealer, err := secretSealer(v)
		if err != nil {
			return nil, err
		}
		s.Sealer = sealer
		notifier, err := notifierConfig(v)
		if err != nil {
			return nil, err
		}
		notifier.Store = s
		return storeSecrets{s, notifier}, nil
	})
}

// secretsKeyFile is the config key naming the file of the key secrets are
// sealed with in the database; envSecretsKey holds the key itself, for a
// server whose settings come from its environment (a container).
const (
	secretsKeyFile = "secrets.key_file"
	envSecretsKey  = "GPUQ_SECRETS_KEY"
)

// secretSealer reads the key secrets are sealed with: the file the config
// file's secrets.key_file names (closed to other users), or
// GPUQ_SECRETS_KEY; nil when neither is set (values are stored as they
// are). Either holds the key in base64.
func secretSealer(v *viper.Viper) (*store.SecretSealer, error) {
	var conf struct {
		KeyFile string `mapstructure:"key_file"`
	}
	if err := v.UnmarshalKey("secrets", &conf, configDecodeHook()); err != nil {
		return nil, fmt.Errorf("config key secrets: %w", control.UnknownKeys(err, reflect.TypeOf(conf)))
	}
	env := os.Getenv(envSecretsKey)
	switch {
	case conf.KeyFile != "" && env != "":
		return nil, fmt.Errorf("%s and %s are both set: give the key once", secretsKeyFile, envSecretsKey)
	case env != "":
		return newSealer(env, envSecretsKey, fmt.Sprintf("openssl rand -base64 %d", store.SecretKeyBytes))
	case conf.KeyFile == "":
		return nil, nil
	}
	fi, err := os.Stat(conf.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", secretsKeyFile, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: %s is open to other users (mode %04o): chmod 600 %s", secretsKeyFile, conf.KeyFile, fi.Mode().Perm(), conf.KeyFile)
	}
	data, err := readBounded(conf.KeyFile, 1<<10)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", secretsKeyFile, err)
	}
	return newSealer(string(data), secretsKeyFile+": "+conf.KeyFile,
		fmt.Sprintf("head -c %d /dev/urandom | base64 > %s", store.SecretKeyBytes, conf.KeyFile))
}

// newSealer decodes a key in base64 from where (named in an error, which
// never holds the key), made as how says.
func newSealer(b64, where, how string) (*store.SecretSealer, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err == nil && len(key) != store.SecretKeyBytes {
		err = fmt.Errorf("%d bytes", len(key))
	}
	if err != nil {
		return nil, fmt.Errorf("%s must hold %d random bytes in base64 (%s): %v", where, store.SecretKeyBytes, how, err)
	}
	return store.NewSecretSealer(key)
}

// ensureSecretKey writes a new random key to path, mode 0600, unless the
// file is there.
func ensureSecretKey(path string) error {
	key := make([]byte, store.SecretKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := f.WriteString(base64.StdEncoding.EncodeToString(key) + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// apiSecrets manages secrets through the HTTP API.
type apiSecrets struct{ *apiJobs }

func secretsPath(project string) string {
	return "/v1/projects/" + url.PathEscape(project) + "/secrets"
}

func (a apiSecrets) Set(ctx context.Context, project, name, value string) (*queue.Secret, error) {
	body, err := json.Marshal(map[string]string{"value": value})
	if err != nil {
		return nil, err
	}
	var s queue.Secret
	return &s, projectNotFound(project, a.call(ctx, http.MethodPut, secretsPath(project)+"/"+url.PathEscape(name), nil, bytes.NewReader(body), "application/json", &s))
}

func (a apiSecrets) List(ctx context.Context, project string) (*httpapi.Secrets, error) {
	var s httpapi.Secrets
	return &s, projectNotFound(project, a.call(ctx, http.MethodGet, secretsPath(project), nil, nil, "", &s))
}

func (a apiSecrets) Delete(ctx context.Context, project, name string) error {
	resp, err := a.do(ctx, http.MethodDelete, secretsPath(project)+"/"+url.PathEscape(name), nil, nil, "", "application/json")
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return &ExitError{Code: ExitNotFound, Err: errors.New(ae.Detail)}
	}
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func (a apiSecrets) TestWebhook(ctx context.Context, project, name string) (*queue.WebhookTest, error) {
	var res queue.WebhookTest
	err := a.call(ctx, http.MethodPost, "/v1/projects/"+url.PathEscape(project)+"/webhooks/"+url.PathEscape(name)+"/test", nil, nil, "", &res)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return nil, &ExitError{Code: ExitNotFound, Err: errors.New(ae.Detail)}
	}
	return &res, err
}

// storeSecrets manages secrets in the database directly, on the
// control-plane host, and posts test messages from it as its notifier
// would.
type storeSecrets struct {
	s        *store.Store
	notifier *control.Notifier
}

func (q storeSecrets) Close() { q.s.Close() }

func (q storeSecrets) Set(ctx context.Context, project, name, value string) (*queue.Secret, error) {
	return q.s.SetSecret(ctx, project, name, value, "cli")
}

func (q storeSecrets) List(ctx context.Context, project string) (*httpapi.Secrets, error) {
	list, err := q.s.Secrets(ctx, project)
	if err != nil {
		return nil, err
	}
	return &httpapi.Secrets{Project: project, Secrets: list}, nil
}

func (q storeSecrets) Delete(ctx context.Context, project, name string) error {
	err := q.s.DeleteSecret(ctx, project, name)
	if errors.Is(err, queue.ErrNotFound) {
		return &ExitError{Code: ExitNotFound, Err: fmt.Errorf("secret %s is not set for project %s", name, project)}
	}
	return err
}

func (q storeSecrets) TestWebhook(ctx context.Context, project, name string) (*queue.WebhookTest, error) {
	res, err := q.notifier.TestPost(ctx, project, name, "cli")
	if errors.Is(err, queue.ErrSecretMissing) {
		return nil, &ExitError{Code: ExitNotFound, Err: fmt.Errorf("secret %s is not set for project %s", name, project)}
	}
	return res, err
}
