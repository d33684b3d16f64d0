package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
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

// connFlags adds the connection flags every networked command takes.
func connFlags(cmd *cobra.Command) {
	cmd.Flags().String("nats-url", "", "NATS server URL (env GPUQ_NATS_URL)")
	cmd.Flags().String("database-url", "", "PostgreSQL URL (env GPUQ_DATABASE_URL)")
}

// clients are the connections a command uses.
type clients struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	store *store.Store
}

func (c *clients) Close() {
	if c.store != nil {
		c.store.Close()
	}
	if c.nc != nil {
		c.nc.Drain() //nolint:errcheck // closing anyway
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
func dial(ctx context.Context, v *viper.Viper, withDB bool) (*clients, error) {
	natsURL, err := required(v, "nats-url")
	if err != nil {
		return nil, err
	}
	c := &clients{}
	c.nc, err = nats.Connect(natsURL, nats.Name("gpuq"), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s: %w", redactURL(natsURL), err)
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
			return nil, err
		}
		c.store.Events = &queue.EventPublisher{JS: c.js, Logger: slog.Default()}
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

// controlPlane runs the scheduler, the reconciler and the replacer until
// ctx ends.
func controlPlane(ctx context.Context, c *clients, placer control.Placer, logger *slog.Logger) <-chan error {
	return (&control.Plane{JS: c.js, Store: c.store, Placer: placer, Logger: logger}).Start(ctx)
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
func archiveStore(c *clients) workers.ArchiveStore {
	return &workers.ObjectStore{JS: c.js}
}
