package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/workers"
)

func newSubmitCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "submit [-f job.yaml] [flags] [-- command args…]",
		Short: "Submit a job; prints its id",
		Example: `  gpuq submit -f job.yaml
  gpuq submit --name hello --cpu 1 -- echo hello
  gpuq submit --gpu-count 1 --card H100 --residency EU --max-price "2.50 EUR" --wait -- python train.py`,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, format, err := loadConfigFormat(cmd)
			if err != nil {
				return err
			}
			spec, err := specFromFlags(cmd, v, args)
			if err != nil {
				return err
			}
			c, err := dial(cmd.Context(), v, v.GetBool("wait"))
			if err != nil {
				return err
			}
			defer c.Close()
			sub, err := queue.Submit(cmd.Context(), c.js, spec)
			if err != nil {
				return err
			}
			if !v.GetBool("wait") {
				if format == "json" {
					return writeJSON(cmd.OutOrStdout(), sub)
				}
				fmt.Fprintln(cmd.OutOrStdout(), sub.JobID)
				return nil
			}
			fmt.Fprintln(cmd.ErrOrStderr(), sub.JobID)
			return waitFor(cmd.Context(), cmd, c, sub.JobID, format)
		},
	}
	connFlags(cmd)
	f := cmd.Flags()
	f.StringP("file", "f", "", "job spec file (YAML or JSON; - for standard input)")
	f.String("name", "", "spec.name")
	f.String("project", "", "spec.project")
	f.Int("gpu-count", 0, "spec.resources.gpu.count (0: CPU-only)")
	f.StringSlice("card", nil, "spec.resources.gpu.cards, in order of preference")
	f.Int("cpu", 0, "spec.resources.cpu")
	f.Float64("memory-gb", 0, "spec.resources.memory_gb")
	f.String("tier", "", "spec.placement.tier: spot, on-demand or spot-then-on-demand")
	f.StringSlice("region", nil, "spec.placement.regions (globs)")
	f.String("residency", "", "spec.placement.residency (EU, EEA, CH, UK or a configured class)")
	f.String("max-price", "", `spec.budget.max_price_per_hour, e.g. "2.50 EUR"`)
	f.String("idempotency-key", "", "spec.idempotency_key: resubmitting with the same key names the same job")
	f.Int("max-errors", -1, "spec.retries.max_errors")
	f.Duration("timeout", 0, "spec.timeout")
	f.StringArray("env", nil, "spec.env entries, KEY=VALUE")
	f.Bool("wait", false, "wait for the job to finish; exit status 0 only on success")
	return cmd
}

// specFromFlags builds the spec from -f and the flags, through the same
// strict parser as any other submission.
func specFromFlags(cmd *cobra.Command, v *viper.Viper, args []string) (*queue.Spec, error) {
	doc := map[string]any{}
	if path := v.GetString("file"); path != "" {
		var data []byte
		var err error
		if path == "-" {
			data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), queue.MaxSpecBytes+1))
		} else {
			data, err = readLimited(path, queue.MaxSpecBytes+1)
		}
		if err != nil {
			return nil, err
		}
		if len(args) == 0 && !anyFlagChanged(cmd) {
			return queue.ParseSpec(data)
		}
		spec, err := queue.ParseSpec(data)
		if err != nil {
			return nil, err
		}
		b, _ := json.Marshal(spec)
		json.Unmarshal(b, &doc) //nolint:errcheck // it was just marshalled
	}
	set := func(path string, val any) {
		m := doc
		parts := strings.Split(path, ".")
		for _, p := range parts[:len(parts)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[parts[len(parts)-1]] = val
	}
	fl := cmd.Flags()
	for flag, path := range map[string]string{"name": "name", "project": "project", "tier": "placement.tier",
		"residency": "placement.residency", "max-price": "budget.max_price_per_hour", "idempotency-key": "idempotency_key"} {
		if fl.Changed(flag) {
			set(path, v.GetString(flag))
		}
	}
	if fl.Changed("gpu-count") {
		set("resources.gpu.count", v.GetInt("gpu-count"))
	}
	if fl.Changed("card") {
		set("resources.gpu.cards", v.GetStringSlice("card"))
	}
	if fl.Changed("cpu") {
		set("resources.cpu", v.GetInt("cpu"))
	}
	if fl.Changed("memory-gb") {
		set("resources.memory_gb", v.GetFloat64("memory-gb"))
	}
	if fl.Changed("region") {
		set("placement.regions", v.GetStringSlice("region"))
	}
	if fl.Changed("max-errors") {
		set("retries.max_errors", v.GetInt("max-errors"))
	}
	if fl.Changed("timeout") {
		set("timeout", v.GetDuration("timeout").String())
	}
	if fl.Changed("env") {
		env, _ := doc["env"].(map[string]any)
		if env == nil {
			env = map[string]any{}
		}
		vals, _ := fl.GetStringArray("env")
		for _, kv := range vals {
			k, val, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, fmt.Errorf("--env: want KEY=VALUE, got %q", kv)
			}
			env[k] = val
		}
		doc["env"] = env
	}
	if len(args) > 0 {
		set("command", args)
	}
	data, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return queue.ParseSpec(data)
}

func anyFlagChanged(cmd *cobra.Command) bool {
	changed := false
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if f.Name != "file" && f.Name != "wait" && f.Name != "output" && f.Name != "config" && f.Name != "nats-url" && f.Name != "database-url" {
			changed = true
		}
	})
	return changed
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

func parseJobID(arg string) (uuid.UUID, error) {
	id, err := uuid.Parse(arg)
	if err != nil {
		return uuid.Nil, fmt.Errorf("job id %q: not a job id (a UUID such as the one gpuq submit printed)", arg)
	}
	return id, nil
}

// jobCommand is the shape of the commands that act on one job.
func jobCommand(use, short string, withDB bool, run func(cmd *cobra.Command, v *viper.Viper, c *clients, id uuid.UUID, format string) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, format, err := loadConfigFormat(cmd)
			if err != nil {
				return err
			}
			id, err := parseJobID(args[0])
			if err != nil {
				return err
			}
			c, err := dial(cmd.Context(), v, withDB)
			if err != nil {
				return err
			}
			defer c.Close()
			return run(cmd, v, c, id, format)
		},
	}
	connFlags(cmd)
	return cmd
}

// JobStatus is what `gpuq status -o json` prints.
type JobStatus = control.JobStatus

func newStatusCmd() *cobra.Command {
	return jobCommand("status JOB_ID", "Show a job: state, attempts, latest checkpoint, placement, and the last log lines on failure", true,
		func(cmd *cobra.Command, _ *viper.Viper, c *clients, id uuid.UUID, format string) error {
			ctx := cmd.Context()
			st, err := c.client().Status(ctx, id)
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			return printStatus(cmd.OutOrStdout(), st)
		})
}

func printStatus(w io.Writer, st *JobStatus) error {
	j := st.Job
	fmt.Fprintf(w, "job        %s (%s)\nproject    %s\nstate      %s\n", j.ID, j.Name, j.Project, j.State)
	if j.ExitCode != nil {
		fmt.Fprintf(w, "exit code  %d\n", *j.ExitCode)
	}
	if j.Reason != "" {
		fmt.Fprintf(w, "reason     %s\n", j.Reason)
	}
	fmt.Fprintf(w, "attempts   %d (errors %d, preemptions %d)\n", j.Attempt, j.Errors, j.Preemptions)
	if st.Pool != "" {
		fmt.Fprintf(w, "placement  v%d on pool %s\n", j.PlacementVersion, st.Pool)
		var d policy.Decision
		if json.Unmarshal(st.Placement, &d) == nil && d.Chosen != nil {
			o := d.Chosen.Offer
			fmt.Fprintf(w, "           %s %s (%s), %s, %s/h, estimated %s; %d of %d offers feasible\n",
				o.Provider, o.Region, orDash(o.Country), o.Tier, o.PricePerHour, d.Chosen.Cost.Total, d.Feasible, d.Feasible+d.RejectedCount())
			if d.Residency.Class != "" {
				fmt.Fprintf(w, "residency  %s, required by %s\n", d.Residency.Class, strings.Join(d.Residency.ImposedBy, ", "))
			}
			for _, n := range d.Notes {
				fmt.Fprintf(w, "note       %s\n", n)
			}
		}
	}
	if cp := st.LastCheckpoint; cp != nil {
		fmt.Fprintf(w, "checkpoint seq %d, %d bytes, attempt %d, region %s, %s\n", cp.Seq, cp.Bytes, cp.Attempt, cp.Region, cp.CreatedAt.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "submitted  %s\n", j.SubmittedAt.Format(time.RFC3339))
	if len(st.Attempts) > 0 {
		fmt.Fprintln(w)
		t := newTable(w, "ATTEMPT", "HOST", "PID", "POOL", "STARTED", "OUTCOME", "EXIT")
		for _, a := range st.Attempts {
			exit := "-"
			if a.ExitCode != nil {
				exit = fmt.Sprint(*a.ExitCode)
			}
			outcome := a.Outcome
			if outcome == "" {
				outcome = "running"
			}
			t.row(a.Attempt, a.Host, a.PID, a.Pool, a.StartedAt.Format(time.TimeOnly), outcome, exit)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(st.History) > 0 {
		fmt.Fprintln(w)
		t := newTable(w, "AT", "STATE", "ATTEMPT", "EVENT")
		for _, ev := range st.History {
			t.row(ev.At.Format(time.TimeOnly+".000"), ev.State, ev.Attempt, ev.Message)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(st.LastLogLines) > 0 {
		fmt.Fprintln(w, "\nlast log lines:")
		for _, l := range st.LastLogLines {
			fmt.Fprintln(w, "  "+l)
		}
	}
	return nil
}

func newLsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List jobs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, format, err := loadConfigFormat(cmd)
			if err != nil {
				return err
			}
			state := queue.JobState(v.GetString("state"))
			if state != "" && !control.ValidState(state) {
				return fmt.Errorf("--state: must be one of pending, placed, running, succeeded, failed, cancelled, rejected, dead; got %q", state)
			}
			c, err := dial(cmd.Context(), v, true)
			if err != nil {
				return err
			}
			defer c.Close()
			jobs, err := c.client().List(cmd.Context(), queue.ListFilter{State: state, Project: v.GetString("project"), Limit: v.GetInt("limit")})
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), jobs)
			}
			t := newTable(cmd.OutOrStdout(), "ID", "NAME", "PROJECT", "STATE", "ATTEMPT", "POOL", "SUBMITTED")
			for _, j := range jobs {
				t.row(j.ID, j.Name, j.Project, j.State, j.Attempt, orDash(j.Pool), j.SubmittedAt.Format(time.DateTime))
			}
			return t.flush()
		},
	}
	connFlags(cmd)
	cmd.Flags().String("state", "", "only jobs in this state")
	cmd.Flags().String("project", "", "only jobs of this project")
	cmd.Flags().Int("limit", 50, "at most this many jobs")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newLogsCmd() *cobra.Command {
	cmd := jobCommand("logs JOB_ID", "Print a job's output; -f follows it until the job finishes", true,
		func(cmd *cobra.Command, v *viper.Viper, c *clients, id uuid.UUID, format string) error {
			ctx := cmd.Context()
			follow := v.GetBool("follow")
			if format == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				return c.client().Logs(ctx, id, follow, func(ch queue.LogChunk) error {
					for _, line := range strings.SplitAfter(strings.TrimSuffix(string(ch.Data), "\n"), "\n") {
						if err := enc.Encode(map[string]any{"attempt": ch.Attempt, "stream": ch.Stream, "line": strings.TrimSuffix(line, "\n")}); err != nil {
							return err
						}
					}
					return nil
				})
			}
			out := cmd.OutOrStdout()
			return c.client().Logs(ctx, id, follow, func(ch queue.LogChunk) error {
				_, err := out.Write(ch.Data)
				return err
			})
		})
	cmd.Flags().BoolP("follow", "f", false, "keep printing new output until the job finishes")
	return cmd
}

func newWaitCmd() *cobra.Command {
	return jobCommand("wait JOB_ID", "Wait for a job to finish with a live progress line; exit status 0 only on success", true,
		func(cmd *cobra.Command, _ *viper.Viper, c *clients, id uuid.UUID, format string) error {
			return waitFor(cmd.Context(), cmd, c, id, format)
		})
}

// waitFor follows a job's events until it is terminal, drawing one progress
// line on stderr, and fails unless it succeeded.
func waitFor(ctx context.Context, cmd *cobra.Command, c *clients, id uuid.UUID, format string) error {
	start := time.Now()
	errw := cmd.ErrOrStderr()
	drew := false
	job, err := c.client().Wait(ctx, id, func(ev queue.Event) {
		drew = true
		fmt.Fprintf(errw, "\r\033[K%s  %-9s attempt %d  %s  %s", id.String()[:8], ev.State, ev.Attempt, time.Since(start).Round(time.Second), truncate(ev.Message, 60))
	})
	if drew {
		fmt.Fprintln(errw)
	}
	if err != nil {
		return err
	}
	if format == "json" {
		if err := writeJSON(cmd.OutOrStdout(), job); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", id, job.State)
	}
	if job.State != queue.StateSucceeded {
		msg := fmt.Sprintf("job %s %s", id, job.State)
		if job.Reason != "" {
			msg += ": " + job.Reason
		}
		return &ExitError{Code: 1, Err: errors.New(msg)}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func newCancelCmd() *cobra.Command {
	return jobCommand("cancel JOB_ID", "Cancel a job that has not finished; a running job is stopped at once", true,
		func(cmd *cobra.Command, _ *viper.Viper, c *clients, id uuid.UUID, format string) error {
			if err := c.client().Cancel(cmd.Context(), id); err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"job_id": id, "state": queue.StateCancelled})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s cancelled\n", id)
			return nil
		})
}

func newResultsCmd() *cobra.Command {
	cmd := jobCommand("results JOB_ID", "Download a succeeded job's outputs ($GPUQ_OUTPUT_DIR) into --dir", true,
		func(cmd *cobra.Command, v *viper.Viper, c *clients, id uuid.UUID, format string) error {
			ctx := cmd.Context()
			rec, err := c.client().Result(ctx, id)
			if err != nil {
				return err
			}
			dir := v.GetString("dir")
			if dir == "" {
				dir = id.String()
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if err := fetchArchive(ctx, archiveStore(c), rec, dir); err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"job_id": id, "dir": dir, "bytes": rec.Bytes, "sha256": rec.SHA256})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "outputs of %s in %s\n", id, dir)
			return nil
		})
	cmd.Flags().String("dir", "", "directory to unpack into (default: the job id)")
	return cmd
}

// fetchArchive downloads an archive, checks its hash and unpacks it.
func fetchArchive(ctx context.Context, store workers.ArchiveStore, rec *queue.ArchiveRecord, dir string) error {
	f, err := os.CreateTemp("", "gpuq-results-*.tar.zst")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := workers.Download(ctx, store, rec.StoreURI, rec.SHA256, f); err != nil {
		return err
	}
	return workers.Unpack(f, dir)
}
