package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/adapters/sim"
)

// simDev is `gpuq dev --provider sim`: a simulated cloud whose instances are
// worker processes on this machine.
type simDev struct {
	cloud    *sim.Cloud
	provider *sim.Provider
	workers  *local.Launcher
	logger   *slog.Logger
}

// newSimDev reads the simulated cloud's settings (--traces, --sim-speed,
// --sim-start, the config key sim.pools) and refuses bad ones before
// anything starts.
func newSimDev(v *viper.Viper, logger *slog.Logger) (*simDev, error) {
	cfg, err := simConfig(v, logger)
	if err != nil {
		return nil, err
	}
	d := &simDev{workers: &local.Launcher{}, logger: logger}
	if d.cloud, err = sim.New(cfg, d.workers, logger, nil); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	d.provider = d.cloud.Provider(adapters.RetryConfig{})
	return d, nil
}

// simConfig reads the simulated cloud's settings (--traces, --sim-speed,
// --sim-start, the config key sim.pools), refusing a pool whose currency
// placement could not convert.
func simConfig(v *viper.Viper, logger *slog.Logger) (sim.Config, error) {
	dir := v.GetString("traces")
	cfg := sim.Config{TracesDir: dir, Speed: v.GetFloat64("sim-speed"), Start: v.GetDuration("sim-start")}
	if err := v.UnmarshalKey("sim.pools", &cfg.Pools, configDecodeHook()); err != nil {
		return cfg, fmt.Errorf("config key sim.pools: %w", err)
	}
	if len(cfg.Pools) == 0 {
		if dir == "" {
			return cfg, errors.New("--traces: required with --provider sim (the directory of spot traces), unless the config key sim.pools names pools without traces")
		}
		pools, skipped, err := sim.PoolsFromTraces(dir)
		if err != nil {
			return cfg, fmt.Errorf("--traces: %w", err)
		}
		if len(skipped) > 0 {
			logger.Warn("sim: traces of an unknown zone or shape left out", "files", strings.Join(skipped, ", "))
		}
		cfg.Pools = pools
	}
	rules, err := loadRules(v)
	if err != nil {
		return cfg, err
	}
	base := rules.BaseCurrency
	if base == "" {
		base = "EUR"
	}
	rated := map[string]bool{strings.ToUpper(base): true}
	for cur := range rules.ExchangeRates {
		// The config reader lower-cases keys; currencies are upper-case.
		rated[strings.ToUpper(cur)] = true
	}
	for i, p := range cfg.WithDefaults().Pools {
		if !rated[strings.ToUpper(p.Currency)] {
			return cfg, fmt.Errorf("sim.pools[%d].currency: %s has no exchange rate to %s, so placement would refuse the pool; set policy.exchange_rates.%s (e.g. 0.92 with base EUR) or policy.base_currency: %s",
				i, p.Currency, base, p.Currency, p.Currency)
		}
	}
	return cfg, nil
}

func (d *simDev) sources() []adapters.OfferSource { return []adapters.OfferSource{d.provider} }

// start runs the cloud; the autoscaler rents its instances as jobs arrive.
// The returned channel closes once every worker has stopped after ctx ends.
func (d *simDev) start(ctx context.Context, stack *devStack) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.cloud.Run(ctx) //nolint:errcheck // ends with ctx
	}()
	return done
}

// workerArgs are the flags every simulated instance's worker gets: a grace
// two thirds of the shortest pool's, so that a worker has time after its
// job's grace to record and hand back before the provider's SIGKILL.
func (d *simDev) workerArgs() []string {
	var grace time.Duration
	for _, p := range d.cloud.Pools() {
		if g := p.Grace; grace == 0 || g < grace {
			grace = g
		}
	}
	if grace == 0 {
		grace = 10 * time.Second
	}
	return []string{"--grace", (grace * 2 / 3).Round(time.Millisecond).String()}
}
