package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/workers"
)

// connFlags adds the connection flags every networked command of the
// control plane takes.
func connFlags(cmd *cobra.Command) {
	natsFlags(cmd)
	cmd.Flags().String("database-url", "", "PostgreSQL URL (env GPUQ_DATABASE_URL)")
}

// natsFlags adds the NATS connection flags; a worker takes nothing else.
func natsFlags(cmd *cobra.Command) {
	cmd.Flags().String("nats-url", "", "NATS server URL (env GPUQ_NATS_URL)")
	natsAuthFlags(cmd)
}

// natsAuthFlags adds the NATS credential and TLS flags. A password is never
// a flag: it comes in the URL or GPUQ_NATS_CREDENTIAL ("user:password",
// env or config file), or in a .creds file.
func natsAuthFlags(cmd *cobra.Command) {
	cmd.Flags().String("nats-creds", "", "NATS .creds file (user JWT and seed) (env GPUQ_NATS_CREDS)")
	cmd.Flags().String("nats-ca", "", "PEM file of the CA that signed the NATS servers' certificates (env GPUQ_NATS_CA)")
	cmd.Flags().String("nats-cert", "", "PEM client certificate for NATS TLS (env GPUQ_NATS_CERT); needs --nats-key")
	cmd.Flags().String("nats-key", "", "PEM key of --nats-cert (env GPUQ_NATS_KEY)")
}

// natsOptions are the client options of the configured NATS credential and
// TLS settings, and the user name the connection will carry ("" when none).
func natsOptions(v *viper.Viper, natsURL string) ([]nats.Option, string, error) {
	var opts []nats.Option
	user := ""
	for _, part := range strings.Split(natsURL, ",") {
		if u, err := url.Parse(strings.TrimSpace(part)); err == nil && u.User != nil && user == "" {
			user = u.User.Username()
		}
	}
	if s := v.GetString("nats-credential"); s != "" {
		cred, err := queue.ParseNATSCredential(s)
		if err != nil {
			return nil, "", err
		}
		opts = append(opts, nats.UserInfo(cred.User, cred.Password))
		user = cred.User
	}
	if f := v.GetString("nats-creds"); f != "" {
		if _, err := os.Stat(f); err != nil {
			return nil, "", fmt.Errorf("nats-creds: %w", err)
		}
		opts = append(opts, nats.UserCredentials(f))
	}
	if f := v.GetString("nats-ca"); f != "" {
		if _, err := os.Stat(f); err != nil {
			return nil, "", fmt.Errorf("nats-ca: %w", err)
		}
		opts = append(opts, nats.RootCAs(f))
	}
	cert, key := v.GetString("nats-cert"), v.GetString("nats-key")
	switch {
	case cert != "" && key != "":
		for name, f := range map[string]string{"nats-cert": cert, "nats-key": key} {
			if _, err := os.Stat(f); err != nil {
				return nil, "", fmt.Errorf("%s: %w", name, err)
			}
		}
		opts = append(opts, nats.ClientCert(cert, key))
	case cert != "" || key != "":
		return nil, "", fmt.Errorf("nats-cert and nats-key: set both or neither")
	}
	// A worker or submitter credential may hear replies only on its own
	// inbox prefix.
	if p := queue.InboxFor(user); p != "" {
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	return opts, user, nil
}

// redactURL is u with its password, if any, replaced, for messages.
func redactURL(u string) string {
	parts := strings.Split(u, ",")
	for i, part := range parts {
		if p, err := url.Parse(strings.TrimSpace(part)); err == nil && p.User != nil {
			parts[i] = p.Redacted()
		} else if err != nil {
			parts[i] = "(unparsable URL)"
		}
	}
	return strings.Join(parts, ",")
}

// redactErr replaces every secret of the URLs in err's message: a
// malformed URL echoed whole by a driver, or a password.
func redactErr(err error, urls ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	changed := false
	for _, raw := range urls {
		for _, secret := range urlSecrets(raw) {
			if secret != "" && strings.Contains(msg, secret) {
				msg = strings.ReplaceAll(msg, secret, "xxxxx")
				changed = true
			}
		}
	}
	if !changed {
		return err
	}
	return redactedError{msg: msg, err: err}
}

// urlSecrets are the parts of a connection string that must not be shown:
// the password (in URL or key=value form), else the whole string when it
// cannot be parsed.
func urlSecrets(raw string) []string {
	var out []string
	for _, part := range strings.Split(raw, ",") {
		part = strings.TrimSpace(part)
		if u, err := url.Parse(part); err == nil {
			if p, ok := u.User.Password(); ok {
				out = append(out, p, url.QueryEscape(p))
			}
			if p := u.Query().Get("password"); p != "" {
				out = append(out, p)
			}
			continue
		}
		// Unparsable: hide the user info, or everything.
		if at := strings.LastIndex(part, "@"); at > 0 {
			if scheme := strings.Index(part, "://"); scheme >= 0 && scheme+3 < at {
				out = append(out, part[scheme+3:at])
				continue
			}
		}
		out = append(out, part)
	}
	for _, kv := range strings.Fields(raw) {
		if p, ok := strings.CutPrefix(kv, "password="); ok {
			out = append(out, strings.Trim(p, "'"))
		}
	}
	return out
}

// redactedError is an error whose message had secrets removed; errors.Is
// and As still see the original.
type redactedError struct {
	msg string
	err error
}

func (e redactedError) Error() string { return e.msg }
func (e redactedError) Unwrap() error { return e.err }

// clients are the connections a command uses.
type clients struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	store *store.Store
	// policy is the placement policy in effect; nil outside
	// startControlPlane.
	policy *control.PolicyWatch
	// placer places jobs (a retried one through the client service and
	// the HTTP API); nil outside startControlPlane.
	placer control.Placer
	// died reports a control plane loop (scheduler, reconciler,
	// replacer, autoscaler) that ended while it should run; nil outside
	// startControlPlane.
	died chan error
	// metrics is the control plane's collector; nil outside
	// startControlPlane.
	metrics *control.Metrics
	// workers counts the live workers of each pool its liveness monitor
	// hears; nil outside startControlPlane.
	workers *control.LiveWorkers
	// workdirs keeps the working directories users upload; nil outside
	// startControlPlane.
	workdirs *control.Workdirs
	// notifier posts the ends of jobs to their webhooks, and test
	// messages; nil outside startControlPlane.
	notifier *control.Notifier
	// serving counts what serves from the store in the background (the
	// HTTP API), stopped by stopServing before the store is closed.
	serving     sync.WaitGroup
	stopServing []context.CancelFunc
}

// Close stops what serves in the background, waits for it to finish its
// last writes, and closes the store and the NATS connection.
func (c *clients) Close() {
	for _, stop := range c.stopServing {
		stop()
	}
	c.serving.Wait()
	if c.store != nil {
		c.store.Close()
	}
	if c.nc != nil {
		drainNATS(c.nc, natsDrainWait)
	}
}

// natsDrainWait bounds how long closing waits for the NATS connection to
// drain.
const natsDrainWait = 5 * time.Second

// drainNATS drains nc and waits, up to wait, until it has closed. Drain
// returns at once and finishes in the background; what was published last
// (a stopping worker's naks that hand its jobs back, a service's replies)
// reaches the server only if the process lives until then.
func drainNATS(nc *nats.Conn, wait time.Duration) {
	closed := make(chan struct{}, 1)
	nc.SetClosedHandler(func(*nats.Conn) {
		select {
		case closed <- struct{}{}:
		default:
		}
	})
	if nc.IsClosed() {
		return
	}
	if err := nc.Drain(); err != nil {
		nc.Close()
		return
	}
	select {
	case <-closed:
	case <-time.After(wait):
		nc.Close()
	}
}

func required(v *viper.Viper, key string) (string, error) {
	s := v.GetString(key)
	if s == "" {
		env := "GPUQ_" + map[string]string{"nats-url": "NATS_URL", "database-url": "DATABASE_URL"}[key]
		return "", fmt.Errorf("%s: not set; pass --%s, set %s, or run `gpuq dev` in this directory (it writes %s)", key, key, env, devConfigFile)
	}
	return s, nil
}

// dial connects to NATS and, when withDB, to PostgreSQL; events recorded
// through the store are announced on JetStream.
func dial(ctx context.Context, v *viper.Viper, withDB bool, opts ...nats.Option) (*clients, error) {
	natsURL, err := required(v, "nats-url")
	if err != nil {
		return nil, err
	}
	auth, _, err := natsOptions(v, natsURL)
	if err != nil {
		return nil, err
	}
	c := &clients{}
	opts = append(append([]nats.Option{nats.Name("gpuq"), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}, auth...), opts...)
	c.nc, err = nats.Connect(natsURL, opts...)
	if err != nil {
		return nil, redactErr(fmt.Errorf("connecting to NATS at %s: %w", redactURL(natsURL), err), natsURL)
	}
	c.js, err = jetstream.New(c.nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		c.Close()
		return nil, err
	}
	if withDB {
		dbURL, err := required(v, "database-url")
		if err != nil {
			c.Close()
			return nil, err
		}
		if c.store, err = store.Open(ctx, dbURL); err != nil {
			c.Close()
			return nil, redactErr(err, dbURL)
		}
		c.store.Events = &queue.EventPublisher{NATS: c.nc, Logger: slog.Default()}
	}
	return c, nil
}

// localPools reads the config key `pools`.
func localPools(v *viper.Viper) ([]local.PoolConfig, error) {
	var pools []local.PoolConfig
	if err := v.UnmarshalKey("pools", &pools, configDecodeHook()); err != nil {
		return nil, fmt.Errorf("config key pools: %w", err)
	}
	return pools, nil
}

// defaultPools are the local pools of `gpuq dev` and the demo when the
// config names none: CPU capacity in a German region, on-demand and spot.
func defaultPools() []local.PoolConfig {
	return []local.PoolConfig{
		{Pool: "local-cpu", Region: "eu-local-1", Country: "DE", Card: "cpu", VCPU: 64, MemoryGB: 256, Tier: "on-demand", PricePerHour: "0.10", Currency: "EUR"},
		{Pool: "local-cpu-spot", Region: "eu-local-1", Country: "DE", Card: "cpu", VCPU: 64, MemoryGB: 256, Tier: "spot", PricePerHour: "0.03", Currency: "EUR"},
	}
}

// controlPlane runs the scheduler, the reconciler, the replacer and the
// liveness monitor until ctx ends, and serves the worker service; the placer's offer sources are
// its pool registry.
func controlPlane(ctx context.Context, c *clients, placer *control.PolicyPlacer, lostAfter time.Duration, logger *slog.Logger) (<-chan error, error) {
	// The attempts the worker service starts reach the liveness monitor
	// before the workers' beats announce them.
	claims := &control.RecentClaims{}
	workers := &control.LiveWorkers{}
	c.workers = workers
	c.metrics = control.NewMetrics(c.store, c.js, workers, logger)
	svc := &control.WorkerService{NATS: c.nc, Store: c.store, Pools: &control.OfferRegistry{Sources: placer.Sources},
		Placer: placer, JS: c.js, Archives: archiveStore(c), Workdirs: c.workdirs, Logger: logger, Claims: claims, Metrics: c.metrics,
		OutputsReuse: c.store.Storage.OrphanAge / 2}
	if _, err := svc.Start(ctx); err != nil {
		return nil, err
	}
	return (&control.Plane{JS: c.js, NATS: c.nc, Store: c.store, Placer: placer, LostAfter: lostAfter, Claims: claims,
		Workers: workers, Logger: logger}).Start(ctx), nil
}

// offerSources are the providers whose offers the scheduler places among and
// `gpuq plan` and `gpuq offers` read: the configured local pools (or gpuq
// dev's defaults) and each configured real provider (configuredSources).
func offerSources(v *viper.Viper) ([]adapters.OfferSource, error) {
	return configuredSources(v)
}

// placerFor builds the policy placer over the offer sources and the rules
// under the config key `policy`.
func placerFor(v *viper.Viper) (*control.PolicyPlacer, error) {
	sources, err := offerSources(v)
	if err != nil {
		return nil, err
	}
	rules, err := loadRules(v)
	if err != nil {
		return nil, err
	}
	return &control.PolicyPlacer{Sources: sources, Rules: rules}, nil
}

func newLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// archiveStore is the default checkpoint and output store.
func archiveStore(c *clients) *workers.ObjectStore {
	return &workers.ObjectStore{JS: c.js}
}
