package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/sql/migrations"
	"github.com/gpuq/gpuq/sql/pgtemp"
	"github.com/gpuq/gpuq/workers"
)

func newMigrateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the embedded database migrations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			url, err := required(v, "database-url")
			if err != nil {
				return err
			}
			applied, err := migrate(cmd.Context(), url)
			if err != nil {
				return err
			}
			if o, _ := outputFormat(v); o == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"applied": applied})
			}
			if len(applied) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "schema is up to date")
			}
			for _, m := range applied {
				fmt.Fprintln(cmd.OutOrStdout(), "applied", m)
			}
			return nil
		},
	}
	cmd.Flags().String("database-url", "", "PostgreSQL URL (env GPUQ_DATABASE_URL)")
	return cmd
}

func migrate(ctx context.Context, url string) ([]string, error) {
	db, err := sql.Open("postgres", url)
	if err != nil {
		return nil, redactErr(err, url)
	}
	defer db.Close()
	applied, err := migrations.Migrate(ctx, db)
	return applied, redactErr(err, url)
}

// shutdownContext ends on SIGINT or SIGTERM.
func shutdownContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, syscall.SIGINT, syscall.SIGTERM)
}

func newServerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the control plane (scheduler, reconciler, replacer) against NATS and PostgreSQL",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			ctx, stop := shutdownContext(cmd.Context())
			defer stop()
			logger := newLogger()
			c, err := startControlPlane(ctx, v, logger)
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := startHTTP(ctx, v, c, false, logger); err != nil {
				return err
			}
			if _, err := startMetrics(ctx, v, c, logger); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
			case err := <-c.died:
				return err
			}
			logger.Info("server stopping")
			return nil
		},
	}
	connFlags(cmd)
	cmd.Flags().Int("replicas", 1, "JetStream replicas of gpuq's streams and archive buckets (3 on a production cluster)")
	httpFlags(cmd, "")
	metricsFlags(cmd)
	return cmd
}

// startControlPlane migrates, creates the streams and runs the scheduler and
// reconciler in the background until ctx ends. Placement uses sources, or
// the configured providers (offerSources) when there are none.
func startControlPlane(ctx context.Context, v *viper.Viper, logger *slog.Logger, sources ...adapters.OfferSource) (*clients, error) {
	dbURL, err := required(v, "database-url")
	if err != nil {
		return nil, err
	}
	if _, err := migrate(ctx, dbURL); err != nil {
		return nil, redactErr(fmt.Errorf("migrating: %w", err), dbURL)
	}
	storage, err := storageConfig(v)
	if err != nil {
		return nil, err
	}
	c, err := dial(ctx, v, true)
	if err != nil {
		return nil, err
	}
	c.store.Storage = storage
	if c.store.Sealer, err = secretSealer(v); err != nil {
		c.Close()
		return nil, err
	}
	c.workdirs = &control.Workdirs{MaxBytes: storage.WorkdirMaxBytes, Store: &workers.ObjectStore{JS: c.js, Replicas: v.GetInt("replicas"),
		MaxBytes: storage.BucketMaxBytes, MaxAge: map[string]time.Duration{queue.WorkdirBucket: storage.WorkdirRetention}}}
	if err := queue.EnsureStreams(ctx, c.js, queue.StreamOptions{Replicas: v.GetInt("replicas"), MaxBytes: storage.StreamLimits()}); err != nil {
		c.Close()
		return nil, err
	}
	var placer *control.PolicyPlacer
	if len(sources) > 0 {
		rules, err := loadRules(v)
		if err != nil {
			c.Close()
			return nil, err
		}
		placer = &control.PolicyPlacer{Sources: sources, Rules: rules}
	} else if placer, err = placerFor(v); err != nil {
		c.Close()
		return nil, err
	}
	if v.IsSet("autoscaler") {
		if _, err := autoscalerConfig(v); err != nil {
			c.Close()
			return nil, err
		}
	}
	var budgetStop control.BudgetStopConfig
	if err := v.UnmarshalKey("budget_stop", &budgetStop, configDecodeHook()); err != nil {
		c.Close()
		return nil, fmt.Errorf("config key budget_stop: %w", control.UnknownKeys(err, reflect.TypeOf(budgetStop)))
	}
	if err := budgetStop.Validate(); err != nil {
		c.Close()
		return nil, err
	}
	var liveness struct {
		LostAfter time.Duration `mapstructure:"lost_after"`
	}
	if err := v.UnmarshalKey("liveness", &liveness, configDecodeHook()); err != nil {
		c.Close()
		return nil, fmt.Errorf("config key liveness: %w", control.UnknownKeys(err, reflect.TypeOf(liveness)))
	}
	if err := control.CheckLostAfter(liveness.LostAfter); err != nil {
		c.Close()
		return nil, err
	}
	notifier, err := notifierConfig(v)
	if err != nil {
		c.Close()
		return nil, err
	}
	// The policy an admin set (gpuq policy set, PUT /v1/policy) is in
	// effect on every server; the config file's until one is set.
	c.policy = &control.PolicyWatch{Store: c.store, Config: placer.Rules, Logger: logger}
	if err := c.policy.Refresh(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("reading the placement policy: %w", err)
	}
	go c.policy.Run(ctx)
	placer.Policy = c.policy
	placer.Spend = c.store.Charged           // budgets are charged with recorded spend and reservations
	placer.History = c.store                 // pools' availability is shared by every server
	placer.Checkpoints = c.store.Checkpoints // a move's cost starts from the latest checkpoint
	placer.Outputs = c.store                 // a job reading another's outputs is placed inside its residency
	c.placer = placer
	errc, err := controlPlane(ctx, c, placer, liveness.LostAfter, logger)
	if err != nil {
		c.Close()
		return nil, err
	}
	archives := &workers.ObjectStore{JS: c.js, Replicas: v.GetInt("replicas"), MaxBytes: storage.BucketMaxBytes}
	pruner := &control.Pruner{Store: c.store, Interval: storage.PruneInterval, Logger: logger, Archives: archives,
		Sweeper: archives, Records: c.workdirs.WorkdirRecords(c.store), OrphanAge: storage.OrphanAge}
	go func() {
		if err := pruner.Run(ctx); err != nil {
			logger.Error("checkpoint pruner stopped", "err", err)
		}
	}()
	// Clients read and change jobs through this service, never PostgreSQL.
	clientSvc := &control.ClientService{NATS: c.nc, Store: c.store, JS: c.js, Archives: archiveStore(c), Workers: c.workers,
		Placer: placer, Runs: c.js, Workdirs: c.workdirs, Logger: logger}
	if _, err := clientSvc.Start(ctx); err != nil {
		c.Close()
		return nil, err
	}
	capacity := make(chan error, 2)
	loops, err := startCapacity(ctx, v, c, placer, placer.Sources, logger, capacity)
	if err != nil {
		c.Close()
		return nil, err
	}
	// A loop that ends while the server should run is fatal: the server
	// exits non-zero so that its supervisor restarts it, rather than run on
	// with no scheduler or replacer.
	c.died = make(chan error, 1)
	loopEnded := func(what string, err error) {
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("ended")
		}
		logger.Error(what+" stopped", "err", err)
		select {
		case c.died <- fmt.Errorf("%s stopped: %w", what, err):
		default:
		}
	}
	go func() {
		for range control.PlaneLoops {
			loopEnded("control plane loop", <-errc)
		}
	}()
	go func() {
		for range loops {
			loopEnded("autoscaler", <-capacity)
		}
	}()
	// One server stops the running jobs that reached a budget, so that each
	// stop is alerted once, and asks the deadline jobs running on on-demand
	// to move back to spot when the spot strategy advises it.
	stopper := &control.BudgetStop{Store: c.store, NATS: c.nc, Policy: c.policy, BudgetStopConfig: budgetStop, Logger: logger}
	rebalancer := &control.Rebalancer{Store: c.store, Placer: placer, NATS: c.nc, Logger: logger}
	budgetLead := &control.Leader{Store: c.store, Role: budgetRole, Loops: []func(context.Context) error{stopper.Run, rebalancer.Run}, Logger: logger}
	go func() { loopEnded("budget stop", budgetLead.Run(ctx)) }()
	// One server posts the ends of jobs to their webhooks (spec.notify).
	notifier.Store, notifier.Logger, notifier.Metrics, notifier.JS = c.store, logger, c.metrics, c.js
	c.notifier = notifier
	notifyLead := &control.Leader{Store: c.store, Role: notifyRole, Loops: []func(context.Context) error{notifier.Run}, Logger: logger}
	go func() { loopEnded("notifier", notifyLead.Run(ctx)) }()
	logger.Info("control plane running", "offer_sources", len(placer.Sources))
	return c, nil
}

func poolsOrDefault(v *viper.Viper) ([]local.PoolConfig, error) {
	pools, err := localPools(v)
	if err != nil {
		return nil, err
	}
	if len(pools) == 0 {
		pools = defaultPools()
	}
	return pools, nil
}

// devStack is an embedded NATS server and, unless a database URL is given,
// a private PostgreSQL cluster, both under one data directory. The NATS
// server runs with gpuq's roles, as a deployment's does.
type devStack struct {
	nats *queue.EmbeddedNATS
	pg   *pgtemp.Cluster
	// natsURL carries no credential.
	natsURL string
	dbURL   string
}

// configure points v at the stack with the control plane's credential.
func (s *devStack) configure(v *viper.Viper) {
	v.Set("nats-url", s.natsURL)
	v.Set("nats-credential", s.nats.Control().String())
	v.Set("database-url", s.dbURL)
	v.Set(issuerKey, s.nats.Issuer)
}

// workerEnv is the environment a worker of pool that the stack starts gets
// its credential from: a worker credential scoped to the pool and its
// region, in the environment, never on a command line.
func (s *devStack) workerEnv(pool local.PoolConfig) ([]string, error) {
	cred, err := s.nats.Issuer.IssueWorker(pool.Pool, pool.Region, "")
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", pool.Pool, err)
	}
	return []string{adapters.EnvNATSCredential + "=" + cred.String()}, nil
}

// startDevStack starts NATS and, without dbURL, a private cluster with pg's
// options: `gpuq dev` keeps fsync on, the throwaway demo turns it off.
func startDevStack(ctx context.Context, dataDir, dbURL string, natsPort int, pg pgtemp.Options, logger *slog.Logger) (*devStack, error) {
	s := &devStack{dbURL: dbURL}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, err
	}
	var err error
	if s.nats, err = queue.StartEmbeddedNATS(filepath.Join(dataDir, "nats"), natsPort); err != nil {
		return nil, err
	}
	s.natsURL = s.nats.URL()
	if s.dbURL == "" {
		logger.Info("starting a private PostgreSQL cluster", "dir", filepath.Join(dataDir, "postgres"))
		if s.pg, err = pgtemp.Start(ctx, filepath.Join(dataDir, "postgres"), pg); err != nil {
			s.Stop()
			return nil, fmt.Errorf("no database URL given and %w", err)
		}
		s.dbURL = s.pg.URL()
	}
	return s, nil
}

func (s *devStack) Stop() {
	if s.nats != nil {
		s.nats.Stop()
	}
	if s.pg != nil {
		s.pg.Stop() //nolint:errcheck // shutting down
	}
}

func newDevCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything on this machine: embedded NATS, PostgreSQL, control plane and local worker pools",
		Long: `dev starts an embedded NATS server with JetStream, PostgreSQL (GPUQ_DATABASE_URL, else a
private cluster from the local server binaries), the scheduler and reconciler, and one worker
process per local pool (with --provider sim: one instance per pool of a simulated cloud whose
spot pools follow the traces in --traces). Its connection settings are written to .gpuq/config.yaml so that
gpuq submit, status, logs… run from the same directory find it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			sig, stop := shutdownContext(cmd.Context())
			defer stop()
			// NATS, PostgreSQL and the control plane outlive a stop until
			// every worker has stopped: a stopping worker records its
			// jobs' final checkpoints and hands them back through the
			// worker service, which must still answer.
			ctx, stopPlane := context.WithCancel(context.WithoutCancel(cmd.Context()))
			defer stopPlane()
			logger := newLogger()
			var simulated *simDev
			switch p := v.GetString("provider"); p {
			case "local":
			case "sim":
				if simulated, err = newSimDev(v, logger); err != nil {
					return err
				}
			default:
				return fmt.Errorf("--provider: must be local or sim, got %q", p)
			}
			// dev owns its state directory and the one its config goes
			// to; what a crashed predecessor left running there is its to
			// stop.
			unlock, err := lockDevDirs(v.GetString("data-dir"), filepath.Dir(devConfigFile))
			if err != nil {
				return err
			}
			defer unlock()
			stack, err := startDevStack(ctx, v.GetString("data-dir"), v.GetString("database-url"), v.GetInt("nats-port"),
				pgtemp.Options{Durable: true, Password: true, TakeOver: true}, logger)
			if err != nil {
				return err
			}
			defer stack.Stop()
			stack.configure(v)
			// Secrets are sealed in the database with a key of the data
			// directory, made on the first start, unless the config file
			// names one.
			if v.GetString(secretsKeyFile) == "" && os.Getenv(envSecretsKey) == "" {
				key, err := filepath.Abs(filepath.Join(v.GetString("data-dir"), "secrets.key"))
				if err == nil {
					err = ensureSecretKey(key)
				}
				if err != nil {
					return fmt.Errorf("making gpuq dev's secrets key: %w", err)
				}
				v.Set(secretsKeyFile, key)
			}
			// Everything gpuq dev runs is on this machine, and so may be a
			// webhook its jobs notify: internal addresses are allowed
			// unless its config file says otherwise.
			v.Set(devWebhooksKey, true)
			var sources []adapters.OfferSource
			if simulated != nil {
				sources = simulated.sources()
				v.Set(autoscaleKey, true)
				v.Set(workerArgsKey, simulated.workerArgs())
			}
			c, err := startControlPlane(ctx, v, logger, sources...)
			if err != nil {
				return err
			}
			defer c.Close()
			var workers sync.WaitGroup
			defer func() {
				stopWorkers(stop, &workers, logger)
				stopPlane()
			}()
			apiURL, err := startHTTP(ctx, v, c, !cmd.Flags().Changed("http-addr") && os.Getenv("GPUQ_HTTP_ADDR") == "", logger, sources...)
			if err != nil {
				return err
			}
			metricsURL, err := startMetrics(ctx, v, c, logger)
			if err != nil {
				return err
			}
			token, err := devToken(ctx, c.store, apiURL)
			if err != nil {
				return err
			}
			if err := writeDevConfig(stack, apiURL, token, v.GetString(secretsKeyFile)); err != nil {
				return err
			}
			if simulated != nil {
				done := simulated.start(sig, stack)
				workers.Add(1)
				go func() { <-done; workers.Done() }()
			} else {
				pools, err := poolsOrDefault(v)
				if err != nil {
					return err
				}
				// Nothing preempts this machine's workers: SIGTERM, from
				// dev as it stops or from the kernel should dev die, is a
				// shutdown (a SIGINT sent before a starting worker listens
				// for it is lost where the shell started dev with SIGINT
				// ignored; SIGTERM then still ends the worker).
				launcher := &local.Launcher{Slots: v.GetInt("slots"), Args: []string{"--nats-url", stack.natsURL, "--notice", "none"}, PoolEnv: stack.workerEnv}
				sup := &control.Supervisor{Launcher: launcher, Logger: logger, QuarantinedExit: exitQuarantined}
				for _, p := range pools {
					workers.Add(1)
					go func() {
						defer workers.Done()
						sup.Supervise(sig, p) //nolint:errcheck // ends with sig
					}()
				}
			}
			if o, _ := outputFormat(v); o == "json" {
				if err := writeJSON(cmd.OutOrStdout(), map[string]string{"nats_url": stack.natsURL, "database_url": stack.dbURL, "config": devConfigFile,
					"url": apiURL, "token": token, "token_file": devTokenFile, "metrics_url": metricsURL}); err != nil {
					return err
				}
			} else {
				// Secrets stay in the config file (0600): the terminal
				// shows where to find them.
				fmt.Fprintf(cmd.OutOrStdout(), "gpuq dev is running\n  NATS       %s\n  PostgreSQL %s\n", stack.natsURL, redactURL(stack.dbURL))
				if apiURL != "" {
					tokenFile, _ := filepath.Abs(devTokenFile)
					fmt.Fprintf(cmd.OutOrStdout(), "  export GPUQ_URL=%s\n  export GPUQ_TOKEN=\"$(cat %s)\"\n", apiURL, shellQuote(tokenFile))
				}
				if metricsURL != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "  metrics    %s\n", metricsURL)
				}
				abs, _ := filepath.Abs(devConfigFile)
				fmt.Fprintf(cmd.OutOrStdout(), "(settings and credentials in %s; elsewhere: export GPUQ_CONFIG=%s)\n", devConfigFile, abs)
			}
			<-sig.Done()
			return nil
		},
	}
	cmd.Flags().String("data-dir", ".gpuq", "where dev keeps NATS and PostgreSQL state")
	cmd.Flags().Int("nats-port", 0, "port of the embedded NATS server (0: a free port)")
	cmd.Flags().Int("slots", 2, "job slots per local worker")
	cmd.Flags().String("database-url", "", "PostgreSQL URL (env GPUQ_DATABASE_URL); default: a private cluster under --data-dir")
	cmd.Flags().String("provider", "local", "where workers run: local (one process per pool) or sim (a simulated cloud replaying spot traces)")
	cmd.Flags().String("traces", "", "with --provider sim: the directory of spot traces (ZONE_CARD_COUNT.json) its pools follow")
	cmd.Flags().Float64("sim-speed", 1, "with --provider sim: virtual seconds per real second")
	cmd.Flags().Duration("sim-start", 0, "with --provider sim: how far into the traces the virtual clock starts")
	httpFlags(cmd, "127.0.0.1:8080")
	metricsFlags(cmd)
	return cmd
}

// stopWorkers ends the workers' context with stop and waits until they
// have stopped, each after handing its running jobs back, or until a second
// stop signal says not to wait.
func stopWorkers(stop context.CancelFunc, workers *sync.WaitGroup, logger *slog.Logger) {
	again := make(chan os.Signal, 1)
	signal.Notify(again, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(again)
	stop()
	done := make(chan struct{})
	go func() { workers.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(100 * time.Millisecond):
	}
	logger.Info("stopping: workers hand their running jobs back first (Ctrl-C again to stop at once)")
	select {
	case <-done:
	case <-again:
		logger.Warn("stopping without waiting for the workers: their running jobs are redelivered once their leases expire")
	}
}

// writeDevConfig writes the connection settings, the API's URL and the dev
// token, and the key secrets are sealed with (for commands given
// --database-url), readable by the user only since it holds the token.
func writeDevConfig(s *devStack, apiURL, token, secretsKey string) error {
	body := fmt.Sprintf("# Written by gpuq dev; client commands run from this directory read it.\nnats-url: %s\nnats-credential: %s\ndatabase-url: %s\n",
		s.natsURL, s.nats.Control(), s.dbURL)
	if secretsKey != "" {
		body += fmt.Sprintf("secrets: {key_file: %s}\n", strconv.Quote(secretsKey))
	}
	if apiURL != "" {
		body += fmt.Sprintf("url: %s\ntoken: %s\n", apiURL, token)
	}
	if err := os.MkdirAll(filepath.Dir(devConfigFile), 0o755); err != nil {
		return err
	}
	return writePrivate(devConfigFile, []byte(body))
}

// shellQuote quotes s for a POSIX shell: as it is when it holds only
// characters no shell treats specially, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// devWebhooksKey, set by gpuq dev, allows webhooks internal addresses
// when the config key notifications.allow_private_addresses is not set. (A
// key under notifications set with viper's Set would hide the file's
// others.)
const devWebhooksKey = "internal-dev-webhooks"

// notifierConfig reads the config key notifications: how the ends of jobs
// are posted to their webhooks (spec.notify).
func notifierConfig(v *viper.Viper) (*control.Notifier, error) {
	var cfg struct {
		AllowPrivateAddresses bool          `mapstructure:"allow_private_addresses"`
		Timeout               time.Duration `mapstructure:"timeout"`
		Tries                 int           `mapstructure:"tries"`
	}
	if err := v.UnmarshalKey("notifications", &cfg, configDecodeHook()); err != nil {
		return nil, fmt.Errorf("config key notifications: %w", control.UnknownKeys(err, reflect.TypeOf(cfg)))
	}
	if v.GetBool(devWebhooksKey) && !v.IsSet("notifications.allow_private_addresses") {
		cfg.AllowPrivateAddresses = true
	}
	n := &control.Notifier{AllowPrivateAddresses: cfg.AllowPrivateAddresses, Timeout: cfg.Timeout, Tries: cfg.Tries}
	if err := n.Validate(); err != nil {
		return nil, err
	}
	return n, nil
}
