package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

// Settings `gpuq dev --provider sim` passes to startControlPlane: its pools
// start at zero and are served by the autoscaler alone, whose workers get
// extra flags (a grace inside the simulated pools' own).
const (
	autoscaleKey  = "internal-autoscale"
	workerArgsKey = "internal-worker-args"
	// issuerKey holds the embedded NATS server's *queue.CredentialIssuer
	// in dev and the demo: launched machines get credentials it issues.
	issuerKey = "internal-nats-issuer"
)

// capacityRole is the leadership the autoscaler and the reaper run under.
const capacityRole = "capacity"

// budgetRole is the leadership the budget stop and the rebalancer run under.
const budgetRole = "budget"

// notifyRole is the leadership the notifier runs under.
const notifyRole = "notifications"

// autoscalerConfig reads the config key `autoscaler` and refuses a bad one,
// naming the field.
func autoscalerConfig(v *viper.Viper) (control.AutoscalerConfig, error) {
	var cfg control.AutoscalerConfig
	if err := v.UnmarshalKey("autoscaler", &cfg, configDecodeHook()); err != nil {
		return cfg, fmt.Errorf("config key autoscaler: %w", err)
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// withoutUser is a NATS URL list without the control plane's own user and
// password: a machine gets its own credential beside the URL.
func withoutUser(natsURL string) string {
	parts := strings.Split(natsURL, ",")
	for i, part := range parts {
		if u, err := url.Parse(strings.TrimSpace(part)); err == nil && u.User != nil {
			u.User = nil
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// startCapacity runs the autoscaler and the reaper over the sources that can
// rent instances, when the config has an `autoscaler` section or dev asks
// for it; it returns how many loops report on errc.
func startCapacity(ctx context.Context, v *viper.Viper, c *clients, placer control.Placer, sources []adapters.OfferSource,
	logger *slog.Logger, errc chan<- error) (int, error) {
	if !v.IsSet("autoscaler") && !v.GetBool(autoscaleKey) {
		return 0, nil
	}
	cfg, err := autoscalerConfig(v)
	if err != nil {
		return 0, err
	}
	if n := v.GetInt("slots"); cfg.Defaults.Slots == 0 && n > 0 {
		cfg.Defaults.Slots = n // gpuq dev --slots
	}
	var providers []control.InstanceProvider
	var reaped []control.ReaperProvider
	for _, s := range sources {
		if p, ok := s.(control.InstanceProvider); ok {
			providers = append(providers, p)
		}
		if p, ok := s.(control.ReaperProvider); ok {
			reaped = append(reaped, p)
		}
	}
	boot := control.BootTemplate{NATSURL: withoutUser(v.GetString("nats-url")), WorkerArgs: v.GetStringSlice(workerArgsKey)}
	if issuer, ok := v.Get(issuerKey).(*queue.CredentialIssuer); ok {
		boot.Credentials = control.IssuedCredentials{Issuer: issuer}
	} else {
		// A deployment's NATS server with the users of deploy/nats/auth.conf.
		boot.Credentials = control.PoolPasswords{Lookup: os.LookupEnv}
	}
	auto := &control.Autoscaler{Providers: providers, Store: c.store, Workers: c.store, Pools: c.store, Exhaustions: c.store, JS: c.js, Placer: placer, Config: cfg,
		Boot: boot, Logger: logger}
	reaper := &control.Reaper{Providers: reaped, Store: c.store, Logger: logger}
	// Every instance change is announced on JetStream once it commits;
	// the leader announces what it and any earlier leader recorded.
	announcer := &control.InstanceAnnouncer{Store: c.store, JS: c.js, Logger: logger}
	c.store.InstanceSink = announcer
	// One server of a deployment scales and reaps; the others stand by and
	// take over when it dies.
	lead := &control.Leader{Store: c.store, Role: capacityRole, Loops: []func(context.Context) error{auto.Run, reaper.Run, announcer.Run}, Logger: logger}
	go func() { errc <- lead.Run(ctx) }()
	logger.Info("autoscaler ready to lead", "providers", len(providers), "interval", cfg.WithDefaults().Interval)
	return 1, nil
}
