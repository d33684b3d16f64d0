package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"golang.org/x/sys/unix"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/workers"
	"github.com/gpuq/gpuq/workers/canary"
	"github.com/gpuq/gpuq/workers/notice"
)

func newWorkerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Pull and run the jobs of one pool",
		Long: `worker pulls jobs from its pool's consumer, claims each one fenced by attempt number,
restores its latest checkpoint, runs it, and acknowledges only after its completion is recorded.
A preemption notice (--notice: the provider's metadata service, or SIGTERM on container clouds)
or a shutdown (SIGINT, and SIGTERM where it is not the notice) stops pulling, forwards SIGTERM to
the running jobs, waits up to --grace (cut to fit the notice's deadline) for their final
checkpoint, records it and hands the jobs back at once: after a notice as preempted, with the
provider's reason; after a shutdown as shutdown, which counts as neither an error nor a
preemption of the job or its pool.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The worker's environment and memory hold its NATS
			// credential, and its jobs run as its user: a non-dumpable
			// process's /proc/<pid>/environ and mem are root's and it
			// cannot be traced, so no job (nor anything else of that user)
			// reads them. A job's own exec makes it dumpable again.
			if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
				return fmt.Errorf("making the worker non-dumpable, which keeps its credential from its jobs: %w", err)
			}
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			region, country, err := workerLocation(cmd, v, v.GetString("pool"))
			if err != nil {
				return err
			}
			cfg := workers.Config{
				Pool: v.GetString("pool"), Slots: v.GetInt("slots"), Region: region,
				Country: country, WorkerID: v.GetString("worker-id"),
				AckWait: v.GetDuration("ack-wait"), Grace: v.GetDuration("grace"), DataDir: v.GetString("data-dir"),
				NodeID: canary.NodeID(v.GetString("instance-id")), PassEnv: passEnv(v), Logger: newLogger(),
			}
			if cfg.JobUser, cfg.JobUIDs, err = jobUsers(v.GetString("run-as"), v.GetString("job-uids")); err != nil {
				return err
			}
			if cfg.JobUser != nil || cfg.JobUIDs != nil {
				if err := secretsClosedToJobs(cmd, v, cfg.JobUser); err != nil {
					return err
				}
			}
			if cfg.Pool == "" {
				return fmt.Errorf("pool: required; pass --pool or set GPUQ_POOL")
			}
			if !v.GetBool("no-canary") {
				exp, err := canaryExpectationsFor(v, false)
				if err != nil {
					return &ExitError{Code: exitCanaryUsage, Err: err}
				}
				cfg.Canary = &workers.CanaryConfig{Expect: exp, Library: openNVML(), Schedule: canary.Schedule{
					EveryJobs: v.GetInt("canary-every-jobs"), Every: v.GetDuration("canary-every"),
					RetryAfter: v.GetDuration("canary-retry-after"), QuarantineAfter: v.GetInt("quarantine-after"),
				}}
			}
			// Early warnings go on the running jobs' trails once the
			// worker exists; the watcher starts after it.
			var worker *workers.Worker
			warn := func(wn notice.Warning) {
				cfg.Logger.Warn("early preemption warning", "notice", wn.Source, "reason", wn.Reason, "at", wn.At)
				worker.Warn(context.WithoutCancel(cmd.Context()), wn.Reason)
			}
			watch, err := noticeWatcher(v, cfg.Logger, warn)
			if err != nil {
				return err
			}
			// The worker creates its pool's bucket with the cap the
			// configuration gives it (storage.bucket_max_bytes).
			storage, err := storageConfig(v)
			if err != nil {
				return err
			}
			cfg.Unpack = storage.Unpack
			// Replies come to the pool's own inbox prefix, so that a
			// worker credential may subscribe to its replies only.
			c, err := dial(cmd.Context(), v, false, nats.CustomInboxPrefix(queue.WorkerInboxPrefix(cfg.Pool)))
			if err != nil {
				return err
			}
			defer c.Close()
			// The control plane creates the streams; a worker credential
			// may not, and may only create its own pool's consumer.
			// A request lost with the server that took it is sent again
			// well inside the lease, so that its repeat finds the attempt
			// it started still live.
			records := workers.NewServiceRecords(c.nc, cfg.Pool, cfg.WorkerID)
			records.Timeout = max(cfg.AckWait/4, time.Second)
			w, err := workers.New(cfg, c.nc, c.js, records,
				&workers.ObjectStore{JS: c.js, Replicas: v.GetInt("replicas"), MaxBytes: storage.BucketMaxBytes})
			if err != nil {
				return err
			}
			worker = w
			// The worker ends its context itself on SIGINT and SIGTERM,
			// with a cause that hands its jobs back after their grace:
			// the command's context, which SIGINT ends too, would stop
			// them without one. Unless SIGTERM is the provider's notice,
			// either signal is someone telling the worker to stop (gpuq
			// dev, Ctrl-C, systemctl stop), not the machine going away.
			ctx, cancel := context.WithCancelCause(context.WithoutCancel(cmd.Context()))
			defer cancel(nil)
			stops := []os.Signal{syscall.SIGINT}
			if watch.kind != notice.SIGTERM {
				// The SIGTERM watcher turns SIGTERM into a notice itself.
				stops = append(stops, syscall.SIGTERM)
			}
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, stops...)
			defer signal.Stop(sigs)
			// A worker that is stopping outlives the SIGINTs and SIGTERMs
			// that follow (Ctrl-C in a terminal reaches gpuq dev's workers
			// beside dev's own SIGTERM): it hands its jobs back and exits
			// by itself. This channel is never read; while it is
			// registered, neither signal takes its default action.
			held := make(chan os.Signal, 1)
			signal.Notify(held, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(held)
			go func() {
				select {
				case <-sigs:
					cancel(workers.ErrShutdown)
				case <-ctx.Done():
				}
			}()
			var noticed atomic.Pointer[notice.Notice]
			go func() {
				n, err := watch.watcher.Watch(ctx)
				if err != nil {
					return
				}
				attrs := []any{"notice", n.Source, "kind", n.Kind, "reason", n.Reason}
				if !n.Deadline.IsZero() {
					// A signal carries no deadline; the grace applies.
					attrs = append(attrs, "deadline", n.Deadline)
				}
				cfg.Logger.Warn("preemption notice: handing work back", attrs...)
				noticed.Store(n)
				cancel(&workers.Preemption{Reason: n.Reason, Deadline: n.Deadline})
			}()
			err = w.Run(ctx)
			if n := noticed.Load(); n != nil {
				// Every final checkpoint is recorded: the provider may
				// take the machine now.
				ackCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				if aerr := n.Ack(ackCtx); aerr != nil {
					cfg.Logger.Warn("acknowledging the preemption notice", "err", aerr)
				}
				stop()
			}
			if errors.Is(err, workers.ErrQuarantined) {
				return &ExitError{Code: exitQuarantined, Err: err}
			}
			return err
		},
	}
	natsFlags(cmd)
	cmd.Flags().String("pool", "", "pool to pull jobs from (required)")
	cmd.Flags().Int("slots", 1, "jobs to run at once")
	cmd.Flags().String("region", "local", "region this worker runs in; checkpoints go to its store (default: the pool's region under pools in the config file)")
	cmd.Flags().String("country", "", "ISO 3166-1 country this worker runs in; jobs whose residency excludes it are refused (default: the pool's country under pools in the config file)")
	cmd.Flags().String("worker-id", "", "name of this worker in attempts (default host-pid)")
	cmd.Flags().Duration("ack-wait", 30*time.Second, "AckWait of the pool's consumer and the claim lease; heartbeats every third of it")
	cmd.Flags().Duration("grace", 20*time.Second, "time a job gets after SIGTERM to save its final checkpoint")
	cmd.Flags().String("data-dir", "", "where attempts keep their checkpoint and output directories (default: a temporary directory)")
	cmd.Flags().String("job-uids", "", "when the worker runs as root, the uids (FIRST-LAST) its running jobs each get one of, with the same gid, owning the job's 0700 directory (default "+workers.DefaultJobUIDs.String()+"; env GPUQ_JOB_UIDS)")
	cmd.Flags().String("run-as", "", "when the worker runs as root, one user every job runs as instead of a uid of its own (root keeps them root) (env GPUQ_RUN_AS)")
	cmd.Flags().StringSlice("pass-env", nil, "a variable of the worker's environment that jobs get too, e.g. CUDA_VISIBLE_DEVICES (repeatable or comma-separated; env GPUQ_PASS_ENV); jobs see nothing else of it")
	cmd.Flags().Int("replicas", 1, "JetStream replicas of gpuq's streams and archive buckets (3 on a production cluster)")
	cmd.Flags().String("instance-id", "", "the provider's id of this machine (env GPUQ_INSTANCE_ID); the node id, default the host name")
	cmd.Flags().String("provider", "local", "provider of the worker's pool; chooses the default --notice")
	cmd.Flags().String("notice", "", "preemption notice to watch: aws, gcp, azure, sigterm or none (default: the provider's)")
	// The endpoint is configurable because the documented addresses are
	// link-local and only answer on the provider's machines: tests point
	// the watcher at a fake, and AWS's IPv6-only instances use
	// http://[fd00:ec2::254].
	cmd.Flags().String("notice-endpoint", "", "base URL of the provider's metadata service (default: the provider's documented address)")
	cmd.Flags().Duration("notice-grace", 0, "with --notice sigterm: the provider's time between SIGTERM and SIGKILL (default: the provider's, RunPod 5s)")
	cmd.Flags().Bool("no-canary", false, "take work without running the NVML canary")
	cmd.Flags().Int("canary-every-jobs", 0, "rerun the canary after this many jobs (0: never)")
	cmd.Flags().Duration("canary-every", 30*time.Minute, "rerun the canary after this long (0: never)")
	cmd.Flags().Duration("canary-retry-after", time.Minute, "after a failed canary, wait this long before the next")
	cmd.Flags().Int("quarantine-after", canary.DefaultQuarantineAfter, "quarantine the node after this many canary failures in a row")
	addCanaryFlags(cmd)
	return cmd
}

// passEnv is --pass-env as names: repeated, comma- or space-separated (env
// GPUQ_PASS_ENV), or a list in the config file.
func passEnv(v *viper.Viper) []string {
	var names []string
	for _, s := range v.GetStringSlice("pass-env") {
		names = append(names, strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })...)
	}
	return names
}

// exitQuarantined is the exit status of a worker whose node was quarantined,
// so that whatever launched it releases the machine instead of restarting it.
const exitQuarantined = 3

func newCheckpointCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "Commands a running job uses to talk to its worker",
	}
	save := &cobra.Command{
		Use:   "save",
		Short: "Commit $GPUQ_CHECKPOINT_DIR as the job's next checkpoint; returns once it is recorded",
		Long: `save asks the worker running this job to pack $GPUQ_CHECKPOINT_DIR, upload it to the
region's checkpoint store and record it. It returns (exit 0, printing the sequence number) only
once the checkpoint is durable; do not modify the directory until it returns.`,
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
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Minute)
			defer cancel()
			seq, err := workers.SaveCheckpoint(ctx, os.Getenv(workers.EnvControlSocket))
			if err != nil {
				return fmt.Errorf("checkpoint save: %w", err)
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]int{"seq": seq})
			}
			fmt.Fprintln(cmd.OutOrStdout(), seq)
			return nil
		},
	}
	cmd.AddCommand(save)
	return cmd
}

// workerNotice is the preemption signal a worker watches.
type workerNotice struct {
	kind    notice.Kind
	watcher notice.Watcher
}

// noticeWatcher builds the watcher --notice names, or the one of the pool's
// --provider.
func noticeWatcher(v *viper.Viper, logger *slog.Logger, onWarning func(notice.Warning)) (*workerNotice, error) {
	kind, grace, err := notice.ForProvider(v.GetString("provider"))
	if s := v.GetString("notice"); s != "" {
		if kind, err = notice.ParseKind(s); err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	if g := v.GetDuration("notice-grace"); g != 0 {
		grace = g
	}
	w, err := notice.New(notice.Config{Kind: kind, Endpoint: v.GetString("notice-endpoint"), Grace: grace,
		OnWarning: onWarning, Logger: logger})
	if err != nil {
		return nil, err
	}
	return &workerNotice{kind: kind, watcher: w}, nil
}

// workerLocation is the region and country of a worker of pool: the pool's
// entry under the config key `pools` (the configuration the control plane
// places with), else --region and --country. A flag or environment variable
// that contradicts the pool's entry is refused rather than silently
// overridden.
func workerLocation(cmd *cobra.Command, v *viper.Viper, pool string) (region, country string, err error) {
	region, country = v.GetString("region"), v.GetString("country")
	pools, err := localPools(v)
	if err != nil {
		return "", "", err
	}
	for _, p := range pools {
		if p.Pool != pool {
			continue
		}
		for _, c := range []struct{ flag, env, got, want string }{
			{"region", "GPUQ_REGION", region, p.Region},
			{"country", "GPUQ_COUNTRY", country, p.Country},
		} {
			explicit := cmd.Flags().Changed(c.flag) || os.Getenv(c.env) != ""
			if explicit && c.got != c.want {
				return "", "", fmt.Errorf("%s: %q contradicts pool %s's %s %q in the config file", c.flag, c.got, pool, c.flag, c.want)
			}
		}
		return p.Region, p.Country, nil
	}
	return region, country, nil
}

// jobUsers is who a worker's jobs run as. A worker running as root runs
// each as a uid of its own from uids (default workers.DefaultJobUIDs), or
// every one as the user runAs names, unless that is root; any other worker
// runs them as itself.
func jobUsers(runAs, uids string) (*workers.JobUser, *workers.UIDRange, error) {
	if os.Geteuid() != 0 {
		if uids != "" {
			return nil, nil, fmt.Errorf("worker.job-uids: only a worker running as root runs its jobs as other users; this one runs them as itself")
		}
		if runAs != "" {
			if self, err := user.Current(); err != nil || (runAs != self.Username && runAs != self.Uid) {
				return nil, nil, fmt.Errorf("worker.run-as: only a worker running as root runs its jobs as another user; this one runs them as itself")
			}
		}
		return nil, nil, nil
	}
	if runAs != "" {
		if uids != "" {
			return nil, nil, fmt.Errorf("worker.job-uids: --run-as %s runs every job as one user; give --run-as or --job-uids, not both", runAs)
		}
		u, err := jobUser(runAs)
		return u, nil, err
	}
	r := workers.DefaultJobUIDs
	if uids != "" {
		var err error
		if r, err = workers.ParseUIDRange(uids); err != nil {
			return nil, nil, fmt.Errorf("worker.job-uids: %w", err)
		}
	}
	return nil, &r, nil
}

// jobUser is the user name names, for --run-as; nil for root.
func jobUser(name string) (*workers.JobUser, error) {
	if name == "root" || name == "0" {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return nil, fmt.Errorf("worker.run-as: no user %q on this machine", name)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil || uid == 0 {
		return nil, fmt.Errorf("worker.run-as: user %q is root; use root to mean so", name)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("worker.run-as: user %q has group id %q", name, u.Gid)
	}
	return &workers.JobUser{Name: u.Username, UID: uint32(uid), GID: uint32(gid)}, nil
}

// secretsClosedToJobs refuses to start a worker whose credential files
// (--nats-creds, --nats-key, a config file holding nats-credential) its
// jobs, running as other users, could read.
func secretsClosedToJobs(cmd *cobra.Command, v *viper.Viper, one *workers.JobUser) error {
	files := []struct{ key, path string }{{"nats-creds", v.GetString("nats-creds")}, {"nats-key", v.GetString("nats-key")}}
	if v.InConfig("nats-credential") {
		files = append(files, struct{ key, path string }{"config", configFile(cmd, v)})
	}
	for _, f := range files {
		if f.path == "" {
			continue
		}
		fi, err := os.Stat(f.path)
		if err != nil {
			continue // reported where it is opened
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		groupReads := one != nil && st != nil && st.Gid == one.GID && fi.Mode().Perm()&0o040 != 0
		if fi.Mode().Perm()&0o004 != 0 || groupReads {
			return fmt.Errorf("worker.%s: %s holds the worker's credential and its jobs, running as other users, may read it; chmod o-r,g-r %s", f.key, f.path, f.path)
		}
	}
	return nil
}
