package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

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
		Long: `Submit a job; prints its id.

The spec comes from -f (YAML or JSON), from the flags, or both: flags override
the file, --env and --label add to its entries, and the command after --
replaces its command, so a file may hold what a sweep's jobs share and leave
the command to each submission. A lone argument ending in .yaml, .yml or
.json, given without --, is the spec file (gpuq submit job.yaml is gpuq submit
-f job.yaml); to run a program with such a name, put it after --.

--batch FILE submits many jobs at once (a sweep): FILE holds {"jobs": [spec,
…]} as POST /v1/jobs/batch takes it, and the spec flags complete every job
(--label sweep=lr gives each the label gpuq wait --label follows). A job's
after, after_ended and inputs' job may name jobs earlier in the file by their
name (a name stands for every earlier job of that name; an input of several
reads each, as NAME-1, NAME-2, …): such a job is submitted once those
are recorded, with their ids in place of the name, so that a whole pipeline
fits in one file. Every spec is checked before any job is submitted; an error
names the job (jobs[7]) and its field. It prints each job's id in the batch's
order (-o json: {"jobs": […]}), names each rejected job on stderr and then
exits 2; with --wait it waits for every job as gpuq wait of their ids does.

--sweep KEY=V1,V2,… submits one job per value without a file: the value
replaces {KEY} in the command, the env values and the name (a name without
{KEY} gets " KEY=value" appended), KEY=value is added to the job's labels, and
an --idempotency-key K becomes "K KEY=value". Several --sweep flags submit
every combination, the last varying fastest. The ids are printed, and --wait
waits, as with --batch.`,
		Example: `  gpuq submit -f job.yaml
  gpuq submit job.yaml
  gpuq submit --name hello --cpu 1 -- echo hello
  gpuq submit -f sweep.yaml --label lr=0.1 -- python train.py --lr 0.1
  gpuq submit --batch sweep-jobs.yaml --label sweep=lr-search --wait
  gpuq submit --sweep lr=0.1,0.01 --sweep seed=1,2 -- python train.py --lr {lr} --seed {seed}
  gpuq submit --gpu-count 1 --card H100 --residency EU --max-price "2.50 EUR" --wait -- python train.py`,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, format, err := loadConfigFormat(cmd)
			if err != nil {
				return err
			}
			wd := newWorkdirs(cmd, v)
			defer wd.close()
			if v.GetString("batch") != "" {
				specs, refs, err := batchFromFile(cmd, v, args, wd)
				if err != nil {
					return err
				}
				warnCredentialEnv(cmd.ErrOrStderr(), specs...)
				return submitBatch(cmd, v, specs, refs, format)
			}
			sweeps, _ := cmd.Flags().GetStringArray("sweep")
			axes, err := parseSweeps(sweeps)
			if err != nil {
				return err
			}
			spec, err := specFromFlags(cmd, v, args, wd)
			if err != nil {
				return err
			}
			warnCredentialEnv(cmd.ErrOrStderr(), spec)
			if len(axes) > 0 {
				specs, err := sweepSpecs(spec, axes, v.GetBool("follow"))
				if err != nil {
					return err
				}
				return submitBatch(cmd, v, specs, &batchRefs{named: make([][]int, len(specs))}, format)
			}
			return submit(cmd, v, spec, format)
		},
	}
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		if strings.HasPrefix(err.Error(), "unknown") {
			// A misspelt flag of submit's, or a flag of the job's own
			// command.
			return fmt.Errorf("%w; to give the job's command flags of its own, put the command after --: gpuq submit [flags] -- CMD ARGS…", flagError(cmd, err))
		}
		return flagError(cmd, err)
	})
	jobFlags(cmd)
	f := cmd.Flags()
	f.StringP("file", "f", "", "job spec file (YAML or JSON; - for standard input)")
	f.StringArray("sweep", nil, "KEY=V1,V2,…: submit one job per value (per combination, with several), {KEY} in the command and env values replaced by it and KEY=value in its labels; prints the ids as --batch does")
	f.String("batch", "", `batch file: {"jobs": [spec, …]} in YAML or JSON, as POST /v1/jobs/batch takes it (- for standard input); the spec flags complete every job`)
	f.String("name", "", "spec.name")
	f.String("project", "", "spec.project")
	f.Int("gpu-count", 0, "spec.resources.gpu.count (0: CPU-only; 1 when only --card is given)")
	f.StringSlice("card", nil, "spec.resources.gpu.cards, in order of preference")
	f.Int("cpu", 0, "spec.resources.cpu")
	f.Float64("memory-gb", 0, "spec.resources.memory_gb")
	f.String("tier", "", "spec.placement.tier: spot, on-demand or spot-then-on-demand")
	f.StringSlice("region", nil, "spec.placement.regions (globs)")
	f.String("residency", "", "spec.placement.residency (EU, EEA, CH, UK or a configured class)")
	f.String("max-price", "", `spec.budget.max_price_per_hour, e.g. "2.50 EUR"`)
	f.String("idempotency-key", "", "spec.idempotency_key: resubmitting with the same key names the same job")
	f.String("workdir", "", "spec.workdir: a local directory (your code, small data) packed, uploaded and unpacked where the command runs")
	f.Int("max-errors", queue.DefaultMaxErrors, "spec.retries.max_errors: non-zero exits retried before the job fails")
	f.Duration("timeout", 0, "spec.timeout")
	f.StringArray("env", nil, "spec.env entries, KEY=VALUE")
	f.StringArray("secret", nil, "spec.secrets: a secret of the project (gpuq secret set) the job finds in the variable of its name; repeat for more")
	f.String("notify", "", "spec.notify.webhook: a secret of the project holding a webhook's URL (Slack, Mattermost, any JSON receiver) the job's end is posted to")
	f.StringSlice("notify-when", nil, "spec.notify.when: the ends posted (succeeded, failed, dead, cancelled, rejected); default every end")
	f.Int("notify-log-lines", 0, "spec.notify.log_lines: how many of the job's last lines of output the post carries (0–50; default none: they leave gpuq for the webhook's service)")
	f.StringSlice("after", nil, "spec.after: the id of a job of the project that must succeed before this one is placed; repeat, or separate ids with commas, for more")
	f.StringSlice("after-ended", nil, "spec.after_ended: the id of a job of the project that must have ended, however it ended, before this one is placed (a summary of a sweep some of whose runs may fail); repeat, or separate ids with commas, for more")
	f.StringArray("input", nil, "spec.inputs: NAME=ID (or ID) reads the outputs of job ID, which must succeed first, in $GPUQ_INPUT_DIR/NAME (default NAME: the id); repeat for more")
	f.StringArray("label", nil, "spec.labels entries, KEY=VALUE (a sweep's jobs share one: gpuq wait and gpuq cancel take --label)")
	f.Bool("wait", false, "wait for the job to finish and print its outcome; exit status 0 only on success")
	f.Bool("follow", false, "print the job's output as it runs, then exit as --wait does (standard output holds only the job's output; its id and outcome go to standard error)")
	f.Bool("no-wait-accept", false, "return once the submission is stored, without waiting for the scheduler to accept or reject it")
	f.Duration("accept-timeout", time.Minute, "how long to wait for the scheduler to accept or reject the job")
	f.Duration("wait-timeout", 0, "with --wait: give up waiting after this long (exit status 7); 0 waits until the job finishes")
	return cmd
}

// credentialWords are the words (between '_') of an environment variable's
// name that mark it as holding a credential.
var credentialWords = []string{"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS"}

// warnCredentialEnv warns, once per name, of an env entry of specs whose
// name marks it as a credential: a spec's env is shown to every reader of
// the job, a secret to none.
func warnCredentialEnv(w io.Writer, specs ...*queue.Spec) {
	warned := map[string]bool{}
	for _, spec := range specs {
		for _, name := range slices.Sorted(maps.Keys(spec.Env)) {
			words := strings.Split(strings.ToUpper(name), "_")
			if warned[name] || !slices.ContainsFunc(words, func(w string) bool { return slices.Contains(credentialWords, w) }) {
				continue
			}
			warned[name] = true
			fmt.Fprintf(w, "gpuq: env %[1]s looks like a credential, and a spec's env is shown to every reader of the job (gpuq status); keep it in a secret instead: printenv %[1]s | gpuq secret set %[1]s, then --secret %[1]s (see the README's Secrets)\n", name)
		}
	}
}

// specFileArg reports whether args, the positional arguments of submit,
// name a spec file rather than a command: one argument ending in .yaml,
// .yml or .json, given without --. Whether the file exists does not
// matter, so that a mistyped name fails as a missing file instead of
// becoming a job that runs it.
func specFileArg(cmd *cobra.Command, args []string) bool {
	if len(args) != 1 || cmd.Flags().ArgsLenAtDash() >= 0 {
		return false
	}
	switch strings.ToLower(filepath.Ext(args[0])) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// specFromFlags builds the spec from -f and the flags, through the same
// strict parser as any other submission.
func specFromFlags(cmd *cobra.Command, v *viper.Viper, args []string, wd *workdirs) (*queue.Spec, error) {
	doc := map[string]any{}
	base := ""
	path := v.GetString("file")
	if path == "" && specFileArg(cmd, args) {
		path, args = args[0], nil
	}
	if path != "" {
		data, err := readInput(cmd, path, queue.MaxSpecBytes+1)
		if err != nil {
			return nil, err
		}
		// The file's fields as written: the flags and the command complete
		// them (a file may leave the command to them), then the whole spec
		// is checked and defaulted at once.
		doc, err = queue.SpecDocument(data)
		if _, local := localWorkdir(doc); err != nil || len(args) == 0 && !anyFlagChanged(cmd) && !local {
			return queue.ParseSpec(data)
		}
		if path != "-" {
			// A workdir in the file is relative to the file.
			base = filepath.Dir(path)
		}
	}
	return completeSpec(cmd, v, doc, args, base, wd)
}

// completeSpec completes doc with the spec flags and args (applySpecFlags),
// uploads the local directory its workdir names (relative to base), and
// checks the whole spec.
func completeSpec(cmd *cobra.Command, v *viper.Viper, doc map[string]any, args []string, base string, wd *workdirs) (*queue.Spec, error) {
	if err := applySpecFlags(cmd, v, doc, args); err != nil {
		return nil, err
	}
	if err := wd.resolve(cmd.Context(), doc, base); err != nil {
		return nil, err
	}
	data, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return queue.ParseSpec(data)
}

// applySpecFlags puts the spec fields given on the command line into doc,
// a spec's fields as written: flags override its fields, --env and --label
// add to its entries, and args, when given, are its command.
func applySpecFlags(cmd *cobra.Command, v *viper.Viper, doc map[string]any, args []string) error {
	// set puts val at path, making the maps above it, and returns the map
	// it put val in.
	set := func(path string, val any) map[string]any {
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
		return m
	}
	fl := cmd.Flags()
	for flag, path := range map[string]string{"name": "name", "project": "project", "tier": "placement.tier",
		"residency": "placement.residency", "max-price": "budget.max_price_per_hour", "idempotency-key": "idempotency_key",
		"notify": "notify.webhook"} {
		if fl.Changed(flag) {
			set(path, v.GetString(flag))
		}
	}
	if fl.Changed("workdir") {
		// A directory given on the command line is relative to where the
		// command runs, not to a spec file.
		dir, err := filepath.Abs(v.GetString("workdir"))
		if err != nil {
			return fmt.Errorf("--workdir: %w", err)
		}
		set("workdir", dir)
	}
	if fl.Changed("gpu-count") {
		set("resources.gpu.count", v.GetInt("gpu-count"))
	}
	if fl.Changed("card") {
		gpu := set("resources.gpu.cards", v.GetStringSlice("card"))
		// A card asks for a GPU: one, unless --gpu-count or the file says
		// how many.
		if _, counted := gpu["count"]; !counted {
			gpu["count"] = 1
		}
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
	if fl.Changed("notify-when") {
		set("notify.when", v.GetStringSlice("notify-when"))
	}
	if fl.Changed("notify-log-lines") {
		set("notify.log_lines", v.GetInt("notify-log-lines"))
	}
	// --env and --label add entries to the file's map.
	for flag, key := range map[string]string{"env": "env", "label": "labels"} {
		if !fl.Changed(flag) {
			continue
		}
		m, _ := doc[key].(map[string]any)
		if m == nil {
			m = map[string]any{}
		}
		vals, _ := fl.GetStringArray(flag)
		for _, kv := range vals {
			k, val, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("--%s: want KEY=VALUE, got %q", flag, kv)
			}
			m[k] = val
		}
		doc[key] = m
	}
	if fl.Changed("secret") {
		vals, _ := fl.GetStringArray("secret")
		if err := addToList(doc, "secrets", "--secret", "names", vals); err != nil {
			return err
		}
	}
	for _, l := range []struct{ flag, key string }{{"after", "after"}, {"after-ended", "after_ended"}} {
		if fl.Changed(l.flag) {
			vals, _ := fl.GetStringSlice(l.flag)
			if err := addToList(doc, l.key, "--"+l.flag, "job ids", vals); err != nil {
				return err
			}
		}
	}
	if fl.Changed("input") {
		vals, _ := fl.GetStringArray("input")
		list, ok := doc["inputs"].([]any)
		if !ok && doc["inputs"] != nil {
			return errors.New("spec.inputs: must be a list of inputs, to which --input adds")
		}
		for _, nv := range vals {
			name, id, ok := strings.Cut(nv, "=")
			if !ok {
				name, id = "", nv
			}
			in := map[string]any{"job": id}
			if name != "" {
				in["name"] = name
			}
			list = append(list, in)
		}
		doc["inputs"] = list
	}
	if len(args) > 0 {
		set("command", args)
	}
	return nil
}

func anyFlagChanged(cmd *cobra.Command) bool {
	changed := false
	cmd.Flags().Visit(func(f *pflag.Flag) {
		switch f.Name {
		case "file", "batch", "sweep", "wait", "follow", "output", "config", "nats-url", "url", "no-wait-accept", "accept-timeout", "wait-timeout":
		default:
			changed = true
		}
	})
	return changed
}

// readInput reads at most limit bytes of the file at path, or of standard
// input when path is "-".
func readInput(cmd *cobra.Command, path string, limit int64) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(io.LimitReader(cmd.InOrStdin(), limit))
	}
	return readLimited(path, limit)
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// jobFlags adds the connection flags of the job commands: the HTTP API's
// URL (its token comes only from GPUQ_TOKEN or the config file, never the
// command line) or NATS. They never take a database URL: jobs are read and
// changed through the control plane.
func jobFlags(cmd *cobra.Command) {
	cmd.Flags().String("nats-url", "", "NATS server URL (env GPUQ_NATS_URL); the control plane's client service answers through it")
	cmd.Flags().String("url", "", "gpuq HTTP API URL (env GPUQ_URL; token from GPUQ_TOKEN or the config file's token key)")
}

// submit submits spec, waits for the scheduler's answer unless
// --no-wait-accept, and with --wait for the job's outcome.
func submit(cmd *cobra.Command, v *viper.Viper, spec *queue.Spec, format string) error {
	ctx := cmd.Context()
	follow := v.GetBool("follow")
	if follow && (format == "json" || v.GetBool("no-wait-accept")) {
		return errors.New("--follow prints the job's output as it runs: it takes neither -o json (--wait -o json prints the finished job) nor --no-wait-accept")
	}
	svc, err := connectJobs(cmd, v)
	if err != nil {
		return err
	}
	defer svc.Close()
	job, err := svc.Submit(ctx, spec)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if !v.GetBool("no-wait-accept") {
		if job, err = waitAccepted(ctx, svc, job, v.GetDuration("accept-timeout")); err != nil {
			return err
		}
		if job.State == queue.StateRejected {
			if err := printJob(out, job, format); err != nil {
				return err
			}
			return outcomeError(job)
		}
	}
	if follow {
		return followJob(cmd, svc, job.ID, v.GetDuration("wait-timeout"))
	}
	if !v.GetBool("wait") {
		if format == "json" {
			return writeJSON(out, job)
		}
		fmt.Fprintln(out, job.ID)
		return nil
	}
	return waitAndPrint(cmd, svc, job.ID, format, v.GetDuration("wait-timeout"))
}

// followJob prints the job's output as it comes until the job finishes,
// then returns as waitAndPrint does, with its id and outcome on stderr, so
// that standard output holds only the job's output.
func followJob(cmd *cobra.Command, svc jobService, id uuid.UUID, timeout time.Duration) error {
	ctx := cmd.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "gpuq: job %s submitted; its output follows\n", id)
	err := printOutput(ctx, cmd, svc, id, logRead{Follow: true})
	var job *queue.Job
	if err == nil {
		job, err = waitJob(ctx, svc, id, func(queue.Event) {})
	}
	if err != nil {
		return waitError(ctx, cmd, id, timeout, err)
	}
	if job.State == queue.StateSucceeded {
		fmt.Fprintf(cmd.ErrOrStderr(), "gpuq: job %s succeeded\n", id)
	}
	return finalOutcome(job)
}

// waitAccepted waits until the scheduler has recorded the job and either
// placed or rejected it.
func waitAccepted(ctx context.Context, svc jobService, job *queue.Job, timeout time.Duration) (*queue.Job, error) {
	if job.State != queue.StatePending {
		return job, nil
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A submission the API answered before the scheduler recorded it (202)
	// is not found for a moment.
	err := retryNotFound(wctx, timeout, func() error {
		return svc.Events(wctx, job.ID, func(ev queue.Event) bool { return ev.State == queue.StatePending })
	})
	if err == nil {
		var got *queue.Job
		if got, err = svc.Job(wctx, job.ID); err == nil && got.State != queue.StatePending {
			return got, nil
		}
	}
	if ctx.Err() != nil {
		return nil, &ExitError{Code: ExitInterrupted, Err: fmt.Errorf("interrupted; job %[1]s was submitted and goes on (gpuq status %[1]s shows it, gpuq cancel %[1]s stops it)", job.ID)}
	}
	if wctx.Err() != nil {
		return nil, &ExitError{Code: ExitTimedOut, Err: fmt.Errorf("job %s submitted, but the scheduler had not accepted or rejected it after %s (gpuq status %s shows it)", job.ID, timeout, job.ID)}
	}
	if err == nil {
		err = fmt.Errorf("job %s is still pending", job.ID)
	}
	return nil, err
}

// printJob prints a job as JSON or as its id and state.
func printJob(w io.Writer, job *queue.Job, format string) error {
	if format == "json" {
		return writeJSON(w, job)
	}
	fmt.Fprintf(w, "%s %s\n", job.ID, job.State)
	return nil
}

func parseJobID(arg string) (uuid.UUID, error) {
	id, err := uuid.Parse(arg)
	if err != nil {
		return uuid.Nil, fmt.Errorf("job id %q: not a job id (a UUID such as the one gpuq submit printed)", arg)
	}
	return id, nil
}

// jobCommand is the shape of the commands that act on one job.
func jobCommand(use, short string, run func(cmd *cobra.Command, v *viper.Viper, svc jobService, id uuid.UUID, format string) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, format, err := loadConfigFormat(cmd)
			if err != nil {
				return err
			}
			id, err := parseJobID(args[0])
			if err != nil {
				return err
			}
			svc, err := connectJobs(cmd, v)
			if err != nil {
				return err
			}
			defer svc.Close()
			return notFoundError(id, run(cmd, v, svc, id, format))
		},
	}
	jobFlags(cmd)
	projectFlag(cmd)
	return cmd
}

// projectFlag adds --project to a command acting on one job or listing
// jobs: the project the job belongs to, when the caller has several.
func projectFlag(cmd *cobra.Command) {
	cmd.Flags().String("project", "", "the project to act in (default: the NATS credential's projects, else the config key projects, else default)")
}

// JobStatus is what `gpuq status -o json` prints.
type JobStatus = control.JobStatus

func newStatusCmd() *cobra.Command {
	cmd := jobCommand("status JOB_ID", "Show a job: state, attempts, latest checkpoint, placement, and the last log lines on failure",
		func(cmd *cobra.Command, _ *viper.Viper, svc jobService, id uuid.UUID, format string) error {
			if explain, _ := cmd.Flags().GetBool("explain"); explain {
				d, err := svc.Explain(cmd.Context(), id)
				if err != nil {
					return err
				}
				if format == "json" {
					return writeJSON(cmd.OutOrStdout(), d)
				}
				return printExplained(cmd.OutOrStdout(), *d)
			}
			st, err := svc.Status(cmd.Context(), id)
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			return printStatus(cmd.OutOrStdout(), st)
		})
	cmd.Flags().Bool("explain", false, "explain the job's current placement in full: every offer it was decided among, the ranked plan B and every rejected offer with its reasons, recomputed from the offers and rules it was made with")
	return cmd
}

// printExplained prints a recomputed decision as `gpuq plan` does; a
// decision that chose nothing lists its rejections alone.
func printExplained(w io.Writer, d policy.Decision) error {
	if d.Chosen == nil {
		return printRejected(w, d)
	}
	return printDecision(w, d)
}

// exampleOf words a rejection tally's first example.
func exampleOf(r policy.ReasonTally) string {
	if len(r.Examples) == 0 {
		return "-"
	}
	return r.Examples[0].Pool + ": " + r.Examples[0].Message
}

// waitingLine says where a placed job stands in its pool's line.
func waitingLine(l *queue.PoolLine) string {
	ahead := "no job of pool " + l.Pool + " has waited longer"
	switch l.Ahead {
	case 0:
	case 1:
		ahead = "1 job of pool " + l.Pool + " has waited longer"
	default:
		ahead = fmt.Sprintf("%d jobs of pool %s have waited longer", l.Ahead, l.Pool)
	}
	switch {
	case l.Workers == nil:
		return fmt.Sprintf("%s; %d running there", ahead, l.Running)
	case *l.Workers == 0:
		return fmt.Sprintf("%s; %d running there; no live worker of the pool", ahead, l.Running)
	}
	workers := "1 live worker"
	if *l.Workers > 1 {
		workers = fmt.Sprintf("%d live workers", *l.Workers)
	}
	switch paused := l.Paused; {
	case paused == nil || *paused == 0:
	case *l.Workers == 1:
		workers += ", paused after host errors"
	case *paused == *l.Workers:
		workers += ", all paused after host errors"
	default:
		workers += fmt.Sprintf(", %d of them paused after host errors", *paused)
	}
	return fmt.Sprintf("%s; %d running there on %s", ahead, l.Running, workers)
}

func printStatus(w io.Writer, st *JobStatus) error {
	j := st.Job
	fmt.Fprintf(w, "job        %s (%s)\nproject    %s\nstate      %s\n", j.ID, j.Name, j.Project, j.State)
	if j.ExitCode != nil {
		fmt.Fprintf(w, "exit code  %d\n", *j.ExitCode)
	}
	if j.Reason != "" {
		fmt.Fprintf(w, "reason     %s\n", printable(j.Reason))
	}
	fmt.Fprintf(w, "attempts   %d (errors %d, preemptions %d)\n", j.Attempt, j.Errors, j.Preemptions)
	if len(st.Spent) > 0 {
		sofar := ""
		if !j.State.Terminal() {
			sofar = " so far"
		}
		fmt.Fprintf(w, "spent      %s%s\n", strings.Join(st.Spent, " + "), sofar)
	}
	if l := leaseLine(j, st.Attempts, time.Now()); l != "" {
		fmt.Fprintf(w, "heartbeat  %s\n", l)
	}
	bound := "" // the residency that keeps the job's output where it runs
	if st.Pool != "" {
		fmt.Fprintf(w, "placement  v%d on pool %s\n", j.PlacementVersion, st.Pool)
		var d policy.Compact
		if json.Unmarshal(st.Placement, &d) == nil && d.Chosen != nil {
			bound = queue.OutputBoundTo(d.Residency.Class, d.Residency.Countries)
			o := d.Chosen.Offer
			fmt.Fprintf(w, "           %s %s (%s), %s, %s/h, estimated %s; %d of %d offers feasible\n",
				o.Provider, o.Region, orDash(o.Country), o.Tier, o.PricePerHour, d.Chosen.Cost.Total, d.Feasible, d.Offers)
			for _, r := range d.Reasons {
				fmt.Fprintf(w, "           %d rejected: %s, e.g. %s\n", r.Offers, r.Code, exampleOf(r))
			}
			if d.Residency.Class != "" {
				fmt.Fprintf(w, "residency  %s, required by %s\n", d.Residency.Class, strings.Join(d.Residency.ImposedBy, ", "))
			}
			for _, n := range d.Notes {
				fmt.Fprintf(w, "note       %s\n", n)
			}
		}
	}
	if l := st.Waiting; l != nil {
		fmt.Fprintf(w, "waiting    %s\n", waitingLine(l))
	}
	if cp := st.LastCheckpoint; cp != nil {
		fmt.Fprintf(w, "checkpoint seq %d, %d bytes, attempt %d, region %s, %s\n", cp.Seq, cp.Bytes, cp.Attempt, cp.Region, cp.CreatedAt.Format(time.RFC3339))
	}
	if j.State.Retryable() {
		again := "runs it again"
		if cp := st.LastCheckpoint; cp != nil {
			again = fmt.Sprintf("resumes it from checkpoint %d", cp.Seq)
		}
		downstream := ""
		if slices.ContainsFunc(st.Dependents, func(d queue.Dependency) bool { return slices.Contains(retryStates, d.State) }) {
			downstream, again = "--downstream ", again+", then the jobs after it that did not succeed"
		}
		fmt.Fprintf(w, "retry      gpuq retry %s%s %s\n", downstream, j.ID, again)
	}
	if j.Spec != nil && j.Spec.Workdir != "" {
		fmt.Fprintf(w, "workdir    %s\n", j.Spec.Workdir)
	}
	if j.Spec != nil && len(j.Spec.Secrets) > 0 {
		fmt.Fprintf(w, "secrets    %s (values not shown)\n", strings.Join(j.Spec.Secrets, ", "))
	}
	for _, l := range inputLines(j.Spec, append(slices.Clip(st.After), st.AfterEnded...)) {
		fmt.Fprintf(w, "input      %s\n", l)
	}
	if l := notifyLine(j, st.Notification, bound); l != "" {
		fmt.Fprintf(w, "notify     %s\n", l)
	}
	for _, l := range afterLines(st.After, false) {
		fmt.Fprintf(w, "after      %s\n", l)
	}
	for _, l := range afterLines(st.AfterEnded, true) {
		fmt.Fprintf(w, "after end  %s\n", l)
	}
	for _, l := range afterLines(st.Dependents, false) {
		fmt.Fprintf(w, "before     %s\n", l)
	}
	if len(st.Dependents) >= control.MaxDependents {
		fmt.Fprintf(w, "before     and maybe more: gpuq ls --runs-after %s --limit 10000 lists them\n", j.ID)
	}
	fmt.Fprintf(w, "submitted  %s\n", j.SubmittedAt.Format(time.RFC3339))
	if len(st.Attempts) > 0 {
		fmt.Fprintln(w)
		t := newTable(w, "ATTEMPT", "HOST", "PID", "POOL", "STARTED", "RAN", "OUTCOME", "EXIT")
		now := time.Now()
		for _, a := range st.Attempts {
			exit := "-"
			if a.ExitCode != nil {
				exit = fmt.Sprint(*a.ExitCode)
			}
			outcome := a.Outcome
			if outcome == "" {
				outcome = "running"
			}
			t.row(a.Attempt, a.Host, a.PID, a.Pool, a.StartedAt.Format(time.TimeOnly), ranFor(a, now), outcome, exit)
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

// ranFor is how long the attempt ran: to its end, or until now while it
// runs (so far); to the tenth of a second below a minute.
func ranFor(a queue.Attempt, now time.Time) string {
	end, suffix := now, " so far"
	if a.EndedAt != nil {
		end, suffix = *a.EndedAt, ""
	}
	d := max(end.Sub(a.StartedAt), 0)
	if d < time.Minute {
		return d.Round(100*time.Millisecond).String() + suffix
	}
	return d.Round(time.Second).String() + suffix
}

// leaseLine tells how a running job's worker is keeping up its lease: its
// last heartbeat and, once a heartbeat is overdue (the worker sends one every
// third of the lease), that it is late and when the lease runs out: a
// worker that is gone looks like this until the control plane hands the job
// back. "" for a job that is not running.
func leaseLine(j *queue.Job, attempts []queue.Attempt, now time.Time) string {
	if j.State != queue.StateRunning || j.LeaseExpiresAt == nil {
		return ""
	}
	i := slices.IndexFunc(attempts, func(a queue.Attempt) bool { return a.Attempt == j.Attempt && a.EndedAt == nil })
	if i < 0 || attempts[i].HeartbeatAt.IsZero() {
		return ""
	}
	beat, expires := attempts[i].HeartbeatAt, *j.LeaseExpiresAt
	ago := now.Sub(beat).Round(time.Second)
	left := expires.Sub(now).Round(time.Second)
	switch {
	case now.After(expires):
		return fmt.Sprintf("late: last %s ago; the lease expired %s ago, so the attempt is lost and the job is handed back", ago, -left)
	case now.Sub(beat) > expires.Sub(beat)/3+heartbeatSlack:
		return fmt.Sprintf("late: last %s ago; lease expires in %s", ago, left)
	}
	return fmt.Sprintf("last %s ago; lease expires in %s", ago, left)
}

// heartbeatSlack is how far past its due time a heartbeat may come before
// status calls it late.
const heartbeatSlack = 2 * time.Second

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
				return fmt.Errorf("--state: must be one of pending, waiting, placed, running, succeeded, failed, cancelled, rejected, dead; got %q", state)
			}
			limit := v.GetInt("limit")
			if limit < 1 || limit > maxListed {
				return fmt.Errorf("--limit: must be 1–%d, got %d", maxListed, limit)
			}
			f := listFilter{State: state, Project: v.GetString("project"), Label: v.GetString("label"), Pool: v.GetString("pool"), Limit: limit}
			if f.Pool != "" && !policy.ValidPool(f.Pool) {
				return fmt.Errorf("--pool: want a pool id (letters, digits, _ or -), got %q", f.Pool)
			}
			if f.Label != "" {
				if _, _, err := queue.ParseLabelFilter(f.Label); err != nil {
					return fmt.Errorf("--label: %w", err)
				}
			}
			if f.Since, err = parseSince(v.GetString("since"), time.Now()); err != nil {
				return err
			}
			if id := v.GetString("runs-after"); id != "" {
				if !queue.ValidJobID(id) {
					return fmt.Errorf("--runs-after: want a job id as gpuq prints it, got %q", id)
				}
				f.RunsAfter = uuid.MustParse(id)
			}
			svc, err := connectJobs(cmd, v)
			if err != nil {
				return err
			}
			defer svc.Close()
			if v.GetBool("count") {
				c, err := svc.Count(cmd.Context(), f)
				if err != nil {
					return err
				}
				return printCounts(cmd.OutOrStdout(), c, format)
			}
			if format != "json" {
				f.Limit++ // one more tells whether the table left some out
			}
			page, err := svc.List(cmd.Context(), f)
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), page)
			}
			more := len(page.Jobs) > limit
			t := newTable(cmd.OutOrStdout(), "ID", "NAME", "PROJECT", "STATE", "ATTEMPT", "POOL", "SUBMITTED")
			for _, j := range page.Jobs[:min(limit, len(page.Jobs))] {
				t.row(j.ID, j.Name, j.Project, j.State, j.Attempt, orDash(j.Pool), j.SubmittedAt.Format(time.DateTime))
			}
			if err := t.flush(); err != nil {
				return err
			}
			if more {
				fmt.Fprintf(cmd.ErrOrStderr(), "gpuq: the newest %d shown; more jobs match (--limit N shows up to %d, --state, --label and --since narrow it)\n", limit, maxListed)
			}
			return nil
		},
	}
	jobFlags(cmd)
	cmd.Flags().String("state", "", "only jobs in this state")
	cmd.Flags().String("project", "", "only jobs of this project (default: every project of the NATS credential, else of the config key projects, else default)")
	cmd.Flags().String("label", "", "only jobs whose spec.labels has this `entry`, key=value")
	cmd.Flags().String("since", "", "only jobs submitted at or after this `time` (RFC 3339, or a duration such as 24h for the last 24 hours)")
	cmd.Flags().String("runs-after", "", "only jobs that run after this `job` (their spec.after or after_ended names its id)")
	cmd.Flags().String("pool", "", "only jobs placed on this `pool` (by their latest placement)")
	cmd.Flags().Int("limit", 50, fmt.Sprintf("at most this many jobs (1–%d)", maxListed))
	cmd.Flags().Bool("count", false, "count every job that matches, by state, instead of listing them (how far a sweep has come)")
	return cmd
}

// printCounts prints jobs counted by state: the states some job is in, in
// the order of a job's life, then the total and how many have finished
// (-o json: the API's document, every state present).
func printCounts(w io.Writer, c *queue.JobCounts, format string) error {
	if format == "json" {
		return writeJSON(w, c)
	}
	t := newTable(w, "STATE", "JOBS")
	for _, st := range queue.States {
		if n := c.States[st]; n > 0 {
			t.row(st, n)
		}
	}
	t.row("total", c.Total)
	if err := t.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d of %d finished\n", c.Finished(), c.Total)
	return err
}

// maxListed is the most jobs gpuq ls lists, page after page.
const maxListed = 10_000

// parseSince reads --since: an RFC 3339 time, or a duration back from now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--since: want an RFC 3339 time such as 2026-01-02T15:04:05Z or a duration such as 24h, got %q", s)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newLogsCmd() *cobra.Command {
	cmd := jobsCommand(&cobra.Command{
		Use:   "logs JOB_ID… | --label KEY=VALUE",
		Short: "Print a job's output; -f follows it until the job finishes",
		Long: `Print a job's output; -f follows it until the job finishes.

--tail N begins with the last N lines of the output stored now (of the
attempt --attempt names, when given), so that -f --tail 20 shows where a job
of hours stands and follows it from there.

With several ids, or --label KEY=VALUE for every job whose labels hold that
entry (a sweep's, in the order submitted), print each job's output in turn
under a line naming it (==> ID (name) state <==); -f follows each until it
finishes before the next. --prefix instead prints every job's output as it
comes, each line under its job's name and short id, so that -f follows a
running sweep whole. -o json adds the job's id to each line's object.`,
		Example: `  gpuq logs -f 01a2490c-414b-74a6-950b-948f7b68feb6
  gpuq logs -f --tail 20 01a2490c-414b-74a6-950b-948f7b68feb6
  gpuq logs --label sweep=lr-search
  gpuq logs -f --prefix --label sweep=lr-search`,
	}, func(cmd *cobra.Command, v *viper.Viper, svc jobService, ids []uuid.UUID, label, format string) error {
		ctx := cmd.Context()
		r := logRead{Follow: v.GetBool("follow"), Tail: v.GetInt("tail"), Attempt: v.GetInt("attempt")}
		only := r.Attempt
		if only < 0 {
			return fmt.Errorf("--attempt: must be 1 or more (0: every attempt), got %d", only)
		}
		if r.Tail < 0 || r.Tail > queue.MaxLogTail {
			return fmt.Errorf("--tail: must be 1–%d lines (0: the whole output), got %d", queue.MaxLogTail, r.Tail)
		}
		if label != "" {
			var err error
			if ids, _, err = labelled(ctx, svc, v.GetString("project"), label); err != nil {
				return err
			}
		}
		if v.GetBool("prefix") {
			return prefixedLogs(ctx, cmd, svc, ids, r, format)
		}
		if len(ids) == 1 && label == "" {
			return notFoundError(ids[0], jobLogs(ctx, cmd, svc, ids[0], r, format, false))
		}
		for i, id := range ids {
			job, err := svc.Job(ctx, id)
			if err != nil {
				return notFoundError(id, err)
			}
			if format != "json" {
				if i > 0 {
					fmt.Fprintln(cmd.OutOrStdout())
				}
				fmt.Fprintf(cmd.OutOrStdout(), "==> %s%s %s <==\n", id, queue.NameSuffix(printable(job.Name)), job.State)
			}
			// An attempt a job has not had prints nothing of it.
			if only > job.Attempt && job.State.Terminal() {
				continue
			}
			if err := notFoundError(id, jobLogs(ctx, cmd, svc, id, r, format, true)); err != nil {
				return err
			}
		}
		return nil
	})
	cmd.Flags().BoolP("follow", "f", false, "keep printing new output until the job finishes (with several jobs, each in turn)")
	cmd.Flags().Int("attempt", 0, "only this attempt's output (`n`: 1 for the first; 0 for every attempt's)")
	cmd.Flags().Bool("prefix", false, "print the jobs' output as it comes, every job's at once, each line under its job's name and short id, instead of one job after another (with -f: follow them all at once)")
	cmd.Flags().Int("tail", 0, "begin with the last `n` lines of output (with --attempt, of that attempt); with -f, then follow new output; 0 prints it all")
	cmd.Flags().String("label", "", "print the output of every job whose spec.labels has this `entry`, key=value, in the order submitted")
	return cmd
}

// jobLogs prints job id's output as r says: only attempt r.Attempt's unless
// 0, from its last r.Tail lines when set, following it until the job
// finishes with r.Follow; as JSON lines with format json, carrying the job's
// id with withID.
func jobLogs(ctx context.Context, cmd *cobra.Command, svc jobService, id uuid.UUID, r logRead, format string, withID bool) error {
	follow, only := r.Follow, r.Attempt
	if only > 0 && !withID {
		// An attempt the job has not had prints nothing: say so, unless
		// following a job that may still come to it.
		job, err := svc.Job(ctx, id)
		if err != nil {
			return err
		}
		if job.Attempt < only && (!follow || job.State.Terminal()) {
			return fmt.Errorf("--attempt %d: job %s has had %d attempt(s)", only, id, job.Attempt)
		}
	}
	if format != "json" {
		return printOutput(ctx, cmd, svc, id, r)
	}
	enc := json.NewEncoder(cmd.OutOrStdout())
	return svc.Logs(ctx, id, r, func(ch queue.LogChunk) error {
		if only != 0 && ch.Attempt != only {
			return nil
		}
		return encodeLines(enc, ch, id, withID)
	})
}

// encodeLines writes each line of ch as a JSON object, carrying the job's
// id with withID.
func encodeLines(enc *json.Encoder, ch queue.LogChunk, id uuid.UUID, withID bool) error {
	for _, line := range strings.SplitAfter(strings.TrimSuffix(string(ch.Data), "\n"), "\n") {
		obj := map[string]any{"attempt": ch.Attempt, "stream": ch.Stream, "line": strings.TrimSuffix(line, "\n")}
		if withID {
			obj["job"] = id
		}
		if err := enc.Encode(obj); err != nil {
			return err
		}
	}
	return nil
}

// maxPrefixedReads bounds the jobs whose output gpuq logs --prefix reads
// at once; the next job in order is read when one of them is done.
const maxPrefixedReads = 32

// prefixedLogs prints the output of the jobs of ids as it comes, up to
// maxPrefixedReads of them at once in the order given, each line under its
// job's name and short id ([lr-0.1 …4f1c9a2b7e10] step 3; -o json: the
// job's id in each line's object), read as r says. It returns the error of
// the first job, in that order, whose output could not be read.
func prefixedLogs(ctx context.Context, cmd *cobra.Command, svc jobService, ids []uuid.UUID, r logRead, format string) error {
	var mu sync.Mutex // one line at a time
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	enc := json.NewEncoder(out)
	errs := make([]error, len(ids))
	slots := make(chan struct{}, maxPrefixedReads)
	var wg sync.WaitGroup
	for i, id := range ids {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-slots }()
			errs[i] = notFoundError(id, prefixedJob(ctx, svc, id, r, func(ch queue.LogChunk, tag string, partial map[string]string) error {
				mu.Lock()
				defer mu.Unlock()
				if format == "json" {
					if ch.Stream == "" {
						return nil // each line's object says its attempt
					}
					return encodeLines(enc, ch, id, true)
				}
				key := strconv.Itoa(ch.Attempt) + "/" + ch.Stream
				lines := strings.Split(partial[key]+string(ch.Data), "\n")
				partial[key] = lines[len(lines)-1]
				w := out
				if ch.Stream == "" {
					w = errOut // what gpuq itself says of the job
				}
				for _, l := range lines[:len(lines)-1] {
					fmt.Fprintf(w, "%s%s\n", tag, l)
				}
				return nil
			}))
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// prefixedJob reads job id's output for prefixedLogs, calling fn with each
// chunk of attempt r.Attempt (every attempt's unless 0), the job's tag and
// the line it left unfinished in each attempt and stream; a line left
// unfinished at the end is ended there, and where a later attempt's
// output begins is said as gpuq says it on stderr.
func prefixedJob(ctx context.Context, svc jobService, id uuid.UUID, r logRead, fn func(queue.LogChunk, string, map[string]string) error) error {
	job, err := svc.Job(ctx, id)
	if err != nil {
		return err
	}
	tag := "[" + shortID(id) + "] "
	if name := printable(job.Name); name != "" {
		tag = "[" + name + " " + shortID(id) + "] "
	}
	if r.Attempt > job.Attempt && job.State.Terminal() {
		return nil // an attempt the job has not had prints nothing of it
	}
	partial, shown := map[string]string{}, 0
	err = svc.Logs(ctx, id, r, func(ch queue.LogChunk) error {
		if r.Attempt != 0 && ch.Attempt != r.Attempt {
			return nil
		}
		if shown != 0 && ch.Attempt != shown {
			if err := fn(queue.LogChunk{Attempt: ch.Attempt, Data: []byte(fmt.Sprintf("gpuq: attempt %d's output follows\n", ch.Attempt))}, tag, partial); err != nil {
				return err
			}
		}
		shown = ch.Attempt
		return fn(ch, tag, partial)
	})
	for key, rest := range partial {
		if rest != "" {
			attempt, stream, _ := strings.Cut(key, "/")
			n, _ := strconv.Atoi(attempt)
			fn(queue.LogChunk{Attempt: n, Stream: stream, Data: []byte("\n")}, tag, partial) //nolint:errcheck // ends the line it left
		}
	}
	return err
}

// printOutput writes the job's output, read as r says (only attempt
// r.Attempt's, unless 0), to stdout. A job retried or preempted has output
// from several attempts: where one ends and the next begins is said on
// stderr, so that standard output holds only the job's own.
func printOutput(ctx context.Context, cmd *cobra.Command, svc jobService, id uuid.UUID, r logRead) error {
	out, shown, only := cmd.OutOrStdout(), 0, r.Attempt
	return svc.Logs(ctx, id, r, func(ch queue.LogChunk) error {
		if only != 0 && ch.Attempt != only {
			return nil
		}
		if shown != 0 && ch.Attempt != shown {
			fmt.Fprintf(cmd.ErrOrStderr(), "gpuq: attempt %d's output follows\n", ch.Attempt)
		}
		shown = ch.Attempt
		_, err := out.Write(ch.Data)
		return err
	})
}

func newWaitCmd() *cobra.Command {
	cmd := jobsCommand(&cobra.Command{
		Use:   "wait JOB_ID… | --label KEY=VALUE",
		Short: "Wait for jobs to finish, showing their progress on stderr; exit status 0 only when every one succeeded",
		Long: `Wait for jobs to finish, showing their progress on stderr; exit status 0
only when every one succeeded.

With one job id, print the job's id and final state (-o json: the job) and
exit with the status of its outcome. With several ids, or --label KEY=VALUE
for every job whose labels hold that entry (a sweep submitted with
labels: {sweep: lr}, in the order submitted), wait for each in turn and print
each one's line as it is reached (-o json: a page of the finished jobs); a
job that did not succeed is also named on stderr with its reason. The exit
status is then 0 when every job succeeded, the status of their outcome when
every other job ended the same way (3 when each one failed), else 1.
--timeout bounds the whole wait.`,
		Example: `  gpuq wait 01a2490c-414b-74a6-950b-948f7b68feb6
  gpuq wait --timeout 2h --label sweep=lr-search`,
	}, func(cmd *cobra.Command, v *viper.Viper, svc jobService, ids []uuid.UUID, label, format string) error {
		timeout := v.GetDuration("timeout")
		if len(ids) == 1 {
			return waitAndPrint(cmd, svc, ids[0], format, timeout)
		}
		var finished map[uuid.UUID]*queue.Job
		if label != "" {
			var err error
			if ids, finished, err = labelled(cmd.Context(), svc, v.GetString("project"), label); err != nil {
				return err
			}
		}
		return waitEach(cmd, svc, ids, finished, format, timeout)
	})
	cmd.Flags().Duration("timeout", 0, "give up waiting after this long (exit status 7); 0 waits until every job finishes")
	cmd.Flags().String("label", "", "wait for every job whose spec.labels has this `entry`, key=value")
	return cmd
}

// jobsCommand completes the shape of the commands that act on jobs named
// by their ids or by a label (cancel, wait): run gets the ids, or the label
// checked, and the connection.
func jobsCommand(cmd *cobra.Command, run func(cmd *cobra.Command, v *viper.Viper, svc jobService, ids []uuid.UUID, label, format string) error) *cobra.Command {
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		v, format, err := loadConfigFormat(cmd)
		if err != nil {
			return err
		}
		ids, label, err := idsOrLabel(cmd, v, args)
		if err != nil {
			return err
		}
		svc, err := connectJobs(cmd, v)
		if err != nil {
			return err
		}
		defer svc.Close()
		return run(cmd, v, svc, ids, label, format)
	}
	jobFlags(cmd)
	projectFlag(cmd)
	return cmd
}

// idsOrLabel reads the job ids, or the --label, of a command that takes
// either (cancel, wait).
func idsOrLabel(cmd *cobra.Command, v *viper.Viper, args []string) ([]uuid.UUID, string, error) {
	label := v.GetString("label")
	switch {
	case label == "" && len(args) == 0:
		return nil, "", fmt.Errorf("%s takes job ids or --label KEY=VALUE (usage: %s)", cmd.Name(), cmd.UseLine())
	case label != "" && len(args) > 0:
		return nil, "", fmt.Errorf("%s takes job ids or --label, not both", cmd.Name())
	case label != "":
		if _, _, err := queue.ParseLabelFilter(label); err != nil {
			return nil, "", fmt.Errorf("--label: %w", err)
		}
	}
	ids := make([]uuid.UUID, len(args))
	for i, a := range args {
		var err error
		if ids[i], err = parseJobID(a); err != nil {
			return nil, "", err
		}
	}
	return ids, label, nil
}

// labelled lists every job whose labels hold label, oldest first, and
// those of them already finished (whose state can no longer change): at
// most maxListed, and none at all is an error, so that a mistyped label is
// not taken for a sweep that succeeded.
func labelled(ctx context.Context, svc jobService, project, label string) ([]uuid.UUID, map[uuid.UUID]*queue.Job, error) {
	page, err := svc.List(ctx, listFilter{Project: project, Label: label, Limit: maxListed + 1})
	switch {
	case err != nil:
		return nil, nil, err
	case len(page.Jobs) == 0:
		return nil, nil, &ExitError{Code: ExitNotFound, Err: fmt.Errorf("no job has the label %s", label)}
	case len(page.Jobs) > maxListed:
		return nil, nil, fmt.Errorf("more than %d jobs have the label %s; wait for them by their ids", maxListed, label)
	}
	ids := make([]uuid.UUID, len(page.Jobs))
	finished := map[uuid.UUID]*queue.Job{}
	for i, j := range page.Jobs {
		ids[len(ids)-1-i] = j.ID
		if j.State.Terminal() {
			finished[j.ID] = j
		}
	}
	return ids, finished, nil
}

// waitEach waits for each job in turn, within timeout for them all,
// printing each one as it is reached (-o json: a page of them at the end)
// and naming on stderr each that did not succeed; a job in finished is
// taken as it is, without asking again. It fails unless every job
// succeeded: with the exit status their outcomes share, else 1; with
// ExitTimedOut when the timeout ran out first, ExitInterrupted on Ctrl-C.
func waitEach(cmd *cobra.Command, svc jobService, ids []uuid.UUID, finished map[uuid.UUID]*queue.Job, format string, timeout time.Duration) error {
	ctx := cmd.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	started := time.Now()
	page := &JobPage{Jobs: []*queue.Job{}}
	codes := map[int]bool{}
	var reached []string      // each job's outcome so far: its state, or "not found"
	var unsuccessful []string // those of the jobs that did not succeed
	var stopped error
	for i, id := range ids {
		job, err := finished[id], error(nil)
		if job == nil {
			sweep := fmt.Sprintf("%d of %d finished · ", i, len(ids))
			if len(reached) > 0 {
				sweep = fmt.Sprintf("%d of %d finished (%s) · ", i, len(ids), tally(reached))
			}
			prog := newSweepProgress(cmd.ErrOrStderr(), id, sweep, started)
			job, err = waitJob(ctx, svc, id, prog.event)
			prog.close()
		}
		if err != nil && cmd.Context().Err() != nil {
			stopped = &ExitError{Code: ExitInterrupted, Err: fmt.Errorf("interrupted; %d of %d jobs not waited for go on", len(ids)-i, len(ids))}
			break
		}
		if err != nil && ctx.Err() != nil {
			stopped = &ExitError{Code: ExitTimedOut, Err: fmt.Errorf("%d of %d jobs not finished after %s", len(ids)-i, len(ids), timeout)}
			break
		}
		outcome := "not found"
		if err == nil {
			page.Jobs = append(page.Jobs, job)
			if format != "json" {
				printJob(cmd.OutOrStdout(), job, format) //nolint:errcheck // a table line
			}
			outcome, err = string(job.State), outcomeError(job)
		} else if err = notFoundError(id, err); exitCode(err) != ExitNotFound {
			return err
		}
		reached = append(reached, outcome)
		if err != nil {
			codes[exitCode(err)] = true
			unsuccessful = append(unsuccessful, outcome)
			fmt.Fprintf(cmd.ErrOrStderr(), "gpuq: %v\n", err)
		}
	}
	if format == "json" {
		if err := writeJSON(cmd.OutOrStdout(), page); err != nil {
			return err
		}
	}
	switch {
	case stopped != nil:
		return stopped
	case len(unsuccessful) == 0:
		return nil
	}
	code := 1
	if len(codes) == 1 {
		for c := range codes {
			code = c
		}
	}
	return &ExitError{Code: code, Err: fmt.Errorf("%d of %d jobs did not succeed (%s)", len(unsuccessful), len(ids), tally(unsuccessful))}
}

// tally counts words: "2 failed, 1 cancelled", in the order each first
// appears.
func tally(words []string) string {
	n := map[string]int{}
	var order []string
	for _, w := range words {
		if n[w] == 0 {
			order = append(order, w)
		}
		n[w]++
	}
	parts := make([]string, len(order))
	for i, w := range order {
		parts[i] = fmt.Sprintf("%d %s", n[w], w)
	}
	return strings.Join(parts, ", ")
}

// waitAndPrint waits for a job to finish, showing its progress on stderr,
// prints the outcome on stdout and fails unless it succeeded.
func waitAndPrint(cmd *cobra.Command, svc jobService, id uuid.UUID, format string, timeout time.Duration) error {
	ctx := cmd.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	prog := newProgress(cmd.ErrOrStderr(), id)
	job, err := waitJob(ctx, svc, id, prog.event)
	prog.close()
	if err != nil {
		return waitError(ctx, cmd, id, timeout, err)
	}
	if err := printJob(cmd.OutOrStdout(), job, format); err != nil {
		return err
	}
	return finalOutcome(job)
}

// waitError is the error of a wait for job id that ended without its
// outcome: interrupted, past its timeout (ctx's), or err.
func waitError(ctx context.Context, cmd *cobra.Command, id uuid.UUID, timeout time.Duration, err error) error {
	switch {
	case cmd.Context().Err() != nil:
		return &ExitError{Code: ExitInterrupted, Err: fmt.Errorf("interrupted; job %[1]s goes on (gpuq wait %[1]s follows it again, gpuq cancel %[1]s stops it)", id)}
	case ctx.Err() != nil:
		return &ExitError{Code: ExitTimedOut, Err: fmt.Errorf("job %s not finished after %s", id, timeout)}
	}
	return notFoundError(id, err)
}

// finalOutcome is outcomeError, saying how to run a failed or dead job
// again.
func finalOutcome(job *queue.Job) error {
	err := outcomeError(job)
	var exit *ExitError
	if (job.State == queue.StateFailed || job.State == queue.StateDead) && errors.As(err, &exit) {
		exit.Err = fmt.Errorf("%w (gpuq retry %s runs it again from its latest checkpoint)", exit.Err, job.ID)
	}
	return err
}

// waitJob follows a job's state changes until it is finished and returns
// it as recorded then.
func waitJob(ctx context.Context, svc jobService, id uuid.UUID, progress func(queue.Event)) (*queue.Job, error) {
	job, err := svc.Job(ctx, id)
	if err != nil || job.State.Terminal() {
		return job, err
	}
	finished := false
	err = svc.Events(ctx, id, func(ev queue.Event) bool {
		progress(ev)
		finished = ev.Ends()
		return !finished
	})
	if err != nil {
		return nil, err
	}
	if !finished && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return svc.Job(ctx, id)
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func newCancelCmd() *cobra.Command {
	cmd := jobsCommand(&cobra.Command{
		Use:   "cancel JOB_ID… | --label KEY=VALUE [--downstream]",
		Short: "Cancel jobs that have not finished; a running job is stopped at once",
		Long: `Cancel jobs that have not finished; a running job is stopped at once.

Give one or more job ids, or --label KEY=VALUE to cancel every unfinished job
whose labels hold that entry (a sweep submitted with labels: {sweep: lr}).
Each cancelled job is printed with its state; a job that cannot be cancelled
is named on stderr and the others are cancelled all the same.

With --downstream, the jobs that run after them (their spec.after or
after_ended names one) and have not finished are cancelled too, and in turn
those after them: a pipeline is abandoned whole. They are cancelled newest
first, before the jobs given, so that none of them is released to run (as a
job of after_ended is once those it runs after have ended) in between. A job
given that has finished is left as it is, and the jobs after it are cancelled.`,
		Example: `  gpuq cancel 01a2490c-414b-74a6-950b-948f7b68feb6
  gpuq cancel --label sweep=lr-search
  gpuq cancel --downstream --label sweep=lr-search`,
	}, func(cmd *cobra.Command, v *viper.Viper, svc jobService, ids []uuid.UUID, label, format string) error {
		ctx := cmd.Context()
		downstream := v.GetBool("downstream")
		if len(ids) == 1 && !downstream {
			job, err := svc.Cancel(ctx, ids[0])
			if err != nil {
				return notFoundError(ids[0], err)
			}
			return printJob(cmd.OutOrStdout(), job, format)
		}
		if label != "" {
			var err error
			if ids, err = labelledIDs(ctx, svc, v, label, false, unfinishedStates...); err != nil {
				return err
			}
			if len(ids) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "gpuq: no unfinished job has the label %s\n", label)
			}
		}
		var after map[uuid.UUID]bool
		if downstream {
			var err error
			finished := func(j *queue.Job) string {
				if !j.State.Terminal() {
					return ""
				}
				return "has finished (" + string(j.State) + "): the jobs after it that have not are cancelled"
			}
			if ids, after, err = withDownstream(ctx, cmd.ErrOrStderr(), svc, ids, unfinishedStates, finished); err != nil {
				return err
			}
			slices.Reverse(ids)
		}
		// A job found by its label or as a job after another that finished
		// meanwhile is passed over.
		skip := func(id uuid.UUID, err error) bool { return (label != "" || after[id]) && isConflict(err) }
		_, err := actOnEach(cmd, ids, "cancelling", "cancelled", svc.Cancel, skip, format)
		return err
	})
	cmd.Flags().String("label", "", "cancel every unfinished job whose spec.labels has this `entry`, key=value")
	cmd.Flags().Bool("downstream", false, "also cancel the jobs that run after them and have not finished, and in turn those after them")
	return cmd
}

// unfinishedStates are the states a job may be cancelled in.
var unfinishedStates = []queue.JobState{queue.StatePending, queue.StateWaiting, queue.StatePlaced, queue.StateRunning}

// labelledIDs lists the jobs in one of states whose labels hold label, in
// the --project given or the caller's projects: state by state, newest
// first, or with oldestFirst all of them in the order they were submitted,
// so that a retry reaches the jobs others run after (spec.after) before
// those others.
func labelledIDs(ctx context.Context, svc jobService, v *viper.Viper, label string, oldestFirst bool, states ...queue.JobState) ([]uuid.UUID, error) {
	var jobs []*queue.Job
	for _, st := range states {
		page, err := svc.List(ctx, listFilter{State: st, Project: v.GetString("project"), Label: label, Limit: maxListed})
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, page.Jobs...)
	}
	if oldestFirst {
		slices.SortStableFunc(jobs, func(a, b *queue.Job) int { return a.SubmittedAt.Compare(b.SubmittedAt) })
	}
	ids := make([]uuid.UUID, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids, nil
}

// actOnEach does act to each job, printing each job it returns (format
// "json": a page of them at the end; "": nothing; a table line with
// printJob, or print when given) and naming on
// stderr each job it failed for (doing: "cancelling"); when that lasts over
// a second, a count of the jobs done shows on stderr. A failure skip
// accepts is passed over in silence; any other makes it fail once every job
// was tried: with ExitNotFound when each failure was a job not found, with
// ExitRejected when each was a rejection, else 1 (done: "cancelled"). It
// returns the jobs acted on.
func actOnEach(cmd *cobra.Command, ids []uuid.UUID, doing, done string, act func(context.Context, uuid.UUID) (*queue.Job, error),
	skip func(uuid.UUID, error) bool, format string, print ...func(io.Writer, *queue.Job)) ([]*queue.Job, error) {
	page := &JobPage{Jobs: []*queue.Job{}}
	failed, codes := 0, map[int]int{}
	shown := newTransfer(cmd.ErrOrStderr(), doing)
	shown.unit = "jobs"
	count := shown.count(int64(len(ids)))
	for _, id := range ids {
		job, err := act(cmd.Context(), id)
		count(1)
		switch {
		case err == nil:
			page.Jobs = append(page.Jobs, job)
			shown.interject(func() {
				switch {
				case format == "table" && len(print) > 0:
					print[0](cmd.OutOrStdout(), job)
				case format == "table":
					printJob(cmd.OutOrStdout(), job, format) //nolint:errcheck // a table line
				}
			})
		case skip != nil && skip(id, err):
		default:
			err = notFoundError(id, err)
			failed++
			codes[exitCode(err)]++
			if !strings.Contains(err.Error(), id.String()) {
				err = fmt.Errorf("%s %s: %w", doing, id, err)
			}
			shown.interject(func() { fmt.Fprintf(cmd.ErrOrStderr(), "gpuq: %v\n", err) })
		}
	}
	shown.close()
	if format == "json" {
		if err := writeJSON(cmd.OutOrStdout(), page); err != nil {
			return page.Jobs, err
		}
	}
	switch {
	case failed == 0:
		return page.Jobs, nil
	case codes[ExitNotFound] == failed:
		return page.Jobs, &ExitError{Code: ExitNotFound, Err: fmt.Errorf("%d of %d jobs not found", failed, len(ids))}
	case codes[ExitRejected] == failed:
		return page.Jobs, &ExitError{Code: ExitRejected, Err: fmt.Errorf("%d of %d jobs not %s", failed, len(ids), done)}
	default:
		return page.Jobs, &ExitError{Code: 1, Err: fmt.Errorf("%d of %d jobs not %s", failed, len(ids), done)}
	}
}

// isConflict reports a request the service refused for the job's state (409):
// a cancel of a job that finished, a retry of one that has not or succeeded.
func isConflict(err error) bool {
	var api *APIError
	var nats *control.ClientError
	return errors.As(err, &api) && api.Status == http.StatusConflict || errors.As(err, &nats) && nats.Code == "409"
}

// exitCode is the exit status err carries (ExitError), else 1.
func exitCode(err error) int {
	var exit *ExitError
	if errors.As(err, &exit) {
		return exit.Code
	}
	return 1
}

func newResultsCmd() *cobra.Command {
	cmd := jobsCommand(&cobra.Command{
		Use:   "results JOB_ID… | --label KEY=VALUE",
		Short: "Download succeeded jobs' outputs ($GPUQ_OUTPUT_DIR) into --dir",
		Long: `Download succeeded jobs' outputs ($GPUQ_OUTPUT_DIR) into --dir.

With one job id, its outputs are unpacked into --dir (default: the job id).
With several ids, or --label KEY=VALUE for every job whose labels hold that
entry (a sweep), each job's outputs go into a directory named by its id under
--dir (default: the current directory), or with --by-name by its name (lr-0.1;
a name several of the jobs share gets the end of the id added); a job with no
outputs to download (not succeeded, or not found) is named on stderr, the
others are downloaded all the same, and the command then exits 1.`,
		Example: `  gpuq results 01a2490c-414b-74a6-950b-948f7b68feb6 --dir out
  gpuq results --label sweep=lr-search --dir sweep-results
  gpuq results --label sweep=lr-search --dir sweep-results --by-name`,
	}, func(cmd *cobra.Command, v *viper.Viper, svc jobService, ids []uuid.UUID, label, format string) error {
		storage, err := storageConfig(v)
		if err != nil {
			return err
		}
		if len(ids) == 1 {
			return notFoundError(ids[0], oneResults(cmd, v, svc, ids[0], storage.Unpack, format))
		}
		var known map[uuid.UUID]*queue.Job
		if label != "" {
			if ids, known, err = labelled(cmd.Context(), svc, v.GetString("project"), label); err != nil {
				return err
			}
		}
		dirs := map[uuid.UUID]string{}
		for _, id := range ids {
			dirs[id] = id.String()
		}
		if v.GetBool("by-name") {
			dirs = byName(cmd.Context(), svc, ids, known)
		}
		return resultsEach(cmd, v, svc, ids, dirs, storage.Unpack, format)
	})
	cmd.Flags().String("dir", "", "directory to unpack into (default: the job id; with several jobs, the current directory, each job under its id)")
	cmd.Flags().String("label", "", "download the outputs of every job whose spec.labels has this `entry`, key=value")
	cmd.Flags().Bool("by-name", false, "with several jobs, name each one's directory by the job's name (lr-0.1), made a safe file name, rather than by its id; a name several of the jobs share, or none, gets the end of the id added")
	return cmd
}

// byName names each job's directory by its name made a safe file name
// (fileName), with - and the last 12 hex digits of its id added
// when several of the jobs' names make the same one (letter case aside:
// some file systems ignore it) or a job has none. known holds jobs read
// already; the others are asked for (one that cannot be read keeps its id,
// and its download says why).
func byName(ctx context.Context, svc jobService, ids []uuid.UUID, known map[uuid.UUID]*queue.Job) map[uuid.UUID]string {
	names := make(map[uuid.UUID]string, len(ids))
	taken := map[string]int{}
	for _, id := range ids {
		j := known[id]
		if j == nil {
			if got, err := svc.Job(ctx, id); err == nil {
				j = got
			}
		}
		if j == nil {
			continue
		}
		names[id] = fileName(j.Name)
		taken[strings.ToLower(names[id])]++
	}
	dirs := make(map[uuid.UUID]string, len(ids))
	for _, id := range ids {
		name, ok := names[id]
		switch {
		case !ok:
			dirs[id] = id.String()
		case name == "":
			dirs[id] = id.String()[24:]
		case taken[strings.ToLower(name)] > 1:
			dirs[id] = name + "-" + id.String()[24:]
		default:
			dirs[id] = name
		}
	}
	// Never two jobs in one directory, whatever names they chose.
	used := map[string]bool{}
	for _, id := range ids {
		if used[strings.ToLower(dirs[id])] {
			dirs[id] = id.String()
		}
		used[strings.ToLower(dirs[id])] = true
	}
	return dirs
}

// fileName is name as a safe name of one directory: ASCII letters, digits
// and ._=+-, anything else as _, no leading . or _, at most 100 bytes.
func fileName(name string) string {
	b := make([]byte, 0, len(name))
	for _, r := range name {
		switch {
		case r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._=+-", r)):
			b = append(b, byte(r))
		default:
			b = append(b, '_')
		}
	}
	s := strings.TrimLeft(string(b), "._")
	return s[:min(len(s), 100)]
}

// oneResults downloads one job's outputs into --dir, the job id by default.
func oneResults(cmd *cobra.Command, v *viper.Viper, svc jobService, id uuid.UUID, lim queue.ArchiveLimits, format string) error {
	dir := v.GetString("dir")
	if dir == "" {
		dir = id.String()
	}
	shown := newTransfer(cmd.ErrOrStderr(), "downloading the outputs of "+id.String())
	res, err := svc.Results(cmd.Context(), id, dir, lim, shown)
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	printResults(cmd.OutOrStdout(), res, dir)
	return nil
}

func printResults(w io.Writer, res *Results, dir string) {
	if len(res.Files) == 0 {
		fmt.Fprintf(w, "job %s succeeded with no outputs (it left $GPUQ_OUTPUT_DIR empty)\n", res.JobID)
		return
	}
	fmt.Fprintf(w, "%d files of %s in %s\n", len(res.Files), res.JobID, dir)
}

// resultsEach downloads each job's outputs into its directory of dirs
// under --dir, printing each as it is done (-o json: {"results": […]} at
// the end); a job whose outputs cannot be had is named on stderr, and the
// command then fails: with ExitNotFound when none of the jobs was found.
func resultsEach(cmd *cobra.Command, v *viper.Viper, svc jobService, ids []uuid.UUID, dirs map[uuid.UUID]string, lim queue.ArchiveLimits, format string) error {
	ctx := cmd.Context()
	all := []*Results{}
	var missing, notFound int
	for _, id := range ids {
		dir := filepath.Join(v.GetString("dir"), dirs[id])
		shown := newTransfer(cmd.ErrOrStderr(), "downloading the outputs of "+id.String())
		res, err := svc.Results(ctx, id, dir, lim, shown)
		if err != nil {
			if ctx.Err() != nil {
				return &ExitError{Code: ExitInterrupted, Err: errors.New("interrupted")}
			}
			missing++
			if err = notFoundError(id, err); exitCode(err) == ExitNotFound {
				notFound++
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "gpuq: %v\n", err)
			continue
		}
		all = append(all, res)
		if format != "json" {
			printResults(cmd.OutOrStdout(), res, dir)
		}
	}
	if format == "json" {
		if err := writeJSON(cmd.OutOrStdout(), map[string]any{"results": all}); err != nil {
			return err
		}
	}
	switch {
	case missing == 0:
		return nil
	case notFound == len(ids):
		return &ExitError{Code: ExitNotFound, Err: fmt.Errorf("none of the %d jobs was found", len(ids))}
	}
	return fmt.Errorf("the outputs of %d of %d jobs were not downloaded", missing, len(ids))
}

// fetchArchive downloads an archive, checks its hash and unpacks it under
// the default limits: the demo uses it for the outputs and checkpoints of
// the jobs it ran itself (`gpuq results` applies the configured ones).
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
	return workers.Unpack(f, dir, queue.ArchiveLimits{})
}

// addToList adds a repeated flag's values to the spec document's list at
// key, after the file's own.
func addToList(doc map[string]any, key, flag, what string, vals []string) error {
	list, ok := doc[key].([]any)
	if !ok && doc[key] != nil {
		return fmt.Errorf("spec.%s: must be a list of %s, to which %s adds", key, what, flag)
	}
	for _, v := range vals {
		list = append(list, v)
	}
	doc[key] = list
	return nil
}

// afterLines describes the jobs a job runs after for gpuq status: each
// one with its name and state, or, for more than five, how many are in
// each state and the first five that have not succeeded (with ended, the
// jobs of its after_ended: that have not ended).
func afterLines(deps []queue.Dependency, ended bool) []string {
	const listed = 5
	line := func(d queue.Dependency) string {
		if d.State == "" {
			return d.ID.String() + " is not a job of this project"
		}
		return d.ID.String() + queue.NameSuffix(d.Name) + " " + string(d.State)
	}
	if len(deps) <= listed {
		out := make([]string, len(deps))
		for i, d := range deps {
			out[i] = line(d)
		}
		return out
	}
	counts := map[queue.JobState]int{}
	var order []queue.JobState
	var open []string
	for _, d := range deps {
		if counts[d.State] == 0 {
			order = append(order, d.State)
		}
		counts[d.State]++
		done := d.State == queue.StateSucceeded || ended && d.State.Terminal()
		if !done && len(open) < listed {
			open = append(open, line(d))
		}
	}
	parts := make([]string, len(order))
	for i, st := range order {
		name := string(st)
		if st == "" {
			name = "not of this project"
		}
		parts[i] = fmt.Sprintf("%d %s", counts[st], name)
	}
	return append([]string{fmt.Sprintf("%d jobs: %s", len(deps), strings.Join(parts, ", "))}, open...)
}

// notifyLine says where the job's ends are posted and how its latest end's
// post went; empty for a job that asked for none. bound names the
// residency its placement keeps it in, which keeps its output out of the
// post.
func notifyLine(j *queue.Job, n *queue.Notification, bound string) string {
	if j.Spec == nil || j.Spec.Notify == nil {
		return ""
	}
	l := "webhook " + j.Spec.Notify.Webhook + " at every end"
	if when := j.Spec.Notify.When; len(when) > 0 {
		ends := make([]string, len(when))
		for i, st := range when {
			ends[i] = string(st)
		}
		l = "webhook " + j.Spec.Notify.Webhook + " when " + strings.Join(ends[:len(ends)-1], ", ")
		if len(ends) > 1 {
			l += " or "
		}
		l += ends[len(ends)-1]
	}
	if k := j.Spec.Notify.LogLines; k > 0 && bound != "" {
		l += fmt.Sprintf(", without its last %d lines of output (the job is kept in %s)", k, bound)
	} else if k > 0 {
		l += fmt.Sprintf(", with its last %d lines of output", k)
	}
	if j.FinalizedAt == nil {
		return l
	}
	if n == nil {
		if !j.Spec.Notify.Wants(j.State) {
			return l + ": this end (" + string(j.State) + ") is not posted"
		}
		return l + ": posting this end"
	}
	switch n.Outcome {
	case queue.NotifyDelivered:
		l += ": delivered"
		if n.LastAt != nil {
			l += " at " + n.LastAt.Format(time.TimeOnly)
		}
		return fmt.Sprintf("%s (HTTP %d)", l, n.HTTPStatus)
	case queue.NotifyPending:
		l += fmt.Sprintf(": try %d failed: %s", n.Tries, printable(n.Error))
		if n.NextAt != nil {
			l += "; next try at " + n.NextAt.Format(time.TimeOnly)
		}
		return l
	default:
		return l + ": not delivered: " + printable(n.Error)
	}
}

// inputLines says what the job reads (spec.inputs): the data with where it
// is stored, and the outputs of other jobs with their name and state now
// (from deps, the jobs it runs after), at most a few before a count.
func inputLines(spec *queue.Spec, deps []queue.Dependency) []string {
	const listed = 8
	if spec == nil {
		return nil
	}
	var out []string
	for i, in := range spec.Inputs {
		if i == listed {
			out = append(out, fmt.Sprintf("and %d more (gpuq status -o json lists them)", len(spec.Inputs)-listed))
			break
		}
		if in.Job == "" {
			where := strings.TrimSpace(strings.Join([]string{in.Provider, in.Region}, " "))
			l := printable(in.Name) + ": " + printable(orDash(in.URI))
			if where != "" {
				l += " (" + printable(where) + ")"
			}
			out = append(out, l)
			continue
		}
		l := fmt.Sprintf("%s: the outputs of job %s", printable(in.Name), in.Job)
		for _, d := range deps {
			if d.ID.String() == in.Job && d.State != "" {
				l += queue.NameSuffix(d.Name) + ", " + string(d.State)
				break
			}
		}
		out = append(out, l+", in $GPUQ_INPUT_DIR/"+printable(in.Name))
	}
	return out
}
