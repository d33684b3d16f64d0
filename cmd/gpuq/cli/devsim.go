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
	slots    int
	logger   *slog.Logger
}

// newSimDev reads the simulated cloud's settings (--traces, --sim-speed,
// --sim-start, the config key sim.pools) and refuses bad ones before
// anything starts.
func newSimDev(v *viper.Viper, logger *slog.Logger) (*simDev, error) {
	dir := v.GetString("traces")
	cfg := sim.Config{TracesDir: dir, Speed: v.GetFloat64("sim-speed"), Start: v.GetDuration("sim-start")}
	if err := v.UnmarshalKey("sim.pools", &cfg.Pools, configDecodeHook()); err != nil {
		return nil, fmt.Errorf("config key sim.pools: %w", err)
	}
	if len(cfg.Pools) == 0 {
		if dir == "" {
			return nil, errors.New("--traces: required with --provider sim (the directory of spot traces), unless the config key sim.pools names pools without traces")
		}
		pools, skipped, err := sim.PoolsFromTraces(dir)
		if err != nil {
			return nil, fmt.Errorf("--traces: %w", err)
		}
		if len(skipped) > 0 {
			logger.Warn("sim: traces of an unknown zone or shape left out", "files", strings.Join(skipped, ", "))
		}
		cfg.Pools = pools
	}
	rules, err := loadRules(v)
	if err != nil {
		return nil, err
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
			return nil, fmt.Errorf("sim.pools[%d].currency: %s has no exchange rate to %s, so placement would refuse the pool; set policy.exchange_rates.%s (e.g. 0.92 with base EUR) or policy.base_currency: %s",
				i, p.Currency, base, p.Currency, p.Currency)
		}
	}
	d := &simDev{workers: &local.Launcher{}, slots: v.GetInt("slots"), logger: logger}
	if d.cloud, err = sim.New(cfg, d.workers, logger, nil); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	d.provider = d.cloud.Provider(adapters.RetryConfig{})
	return d, nil
}

func (d *simDev) sources() []adapters.OfferSource { return []adapters.OfferSource{d.provider} }

// start runs the cloud and keeps one instance in every pool, as `gpuq dev`
// keeps one local worker per pool; the returned channel closes once every
// worker has stopped after ctx ends.
func (d *simDev) start(ctx context.Context, stack *devStack) <-chan struct{} {
	// The simulated machine image: workers still open PostgreSQL
	// themselves, so the machine's environment names it.
	d.workers.Env = []string{"GPUQ_DATABASE_URL=" + stack.dbURL}
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.cloud.Run(ctx) //nolint:errcheck // ends with ctx
	}()
	for _, p := range d.cloud.Pools() {
		go d.keepInstance(ctx, p, stack.natsURL)
	}
	return done
}

// keepInstance keeps one instance of pool: it launches one, waits until it
// is gone (preempted, lost), and launches the next once the pool has
// capacity again.
func (d *simDev) keepInstance(ctx context.Context, pool sim.PoolConfig, natsURL string) {
	name := strings.ReplaceAll(pool.Pool, "_", "-")
	// The worker needs time after its grace to record and hand back
	// before the provider's SIGKILL.
	grace := (pool.Grace * 2 / 3).Round(time.Millisecond)
	for n := 1; ctx.Err() == nil; n++ {
		id := fmt.Sprintf("dev-%s-%d", name, n)
		if len(id) > 64 {
			id = fmt.Sprintf("dev-%d-%d", time.Now().UnixNano(), n)
		}
		req := adapters.LaunchRequest{Pool: pool.Pool, ClientToken: id, Boot: adapters.BootSpec{
			InstanceID: id, Pool: pool.Pool, Region: pool.Region, Country: pool.Country, Slots: d.slots,
			WorkerArgs: []string{"--grace", grace.String()}, NATSURL: natsURL,
		}}
		inst, err := d.launch(ctx, req)
		if err != nil {
			return
		}
		d.logger.Info("sim: launched", "pool", pool.Pool, "instance", inst.ProviderID)
		for ctx.Err() == nil {
			if !sleepCtx(ctx, time.Second) {
				return
			}
			got, err := d.provider.Describe(ctx, inst.ProviderID)
			if err == nil && !got.State.Gone() {
				continue
			}
			if err == nil {
				d.logger.Warn("sim: instance gone; launching the next when the pool has capacity", "pool", pool.Pool, "instance", inst.ProviderID, "state", got.State, "reason", got.Reason)
			}
			if err == nil && got.State == adapters.StateFailed {
				// A worker that died on its own (a crash, a quarantined
				// node) is not relaunched at once, so a crash loop stays slow.
				if !sleepCtx(ctx, 10*time.Second) {
					return
				}
			}
			break
		}
	}
}

// launch retries req until it succeeds or ctx ends; no capacity is waited
// out quietly.
func (d *simDev) launch(ctx context.Context, req adapters.LaunchRequest) (adapters.Instance, error) {
	for {
		inst, err := d.provider.Launch(ctx, req)
		if err == nil {
			return inst, nil
		}
		if !errors.Is(err, adapters.ErrCapacityUnavailable) {
			d.logger.Error("sim: launch failed", "pool", req.Pool, "err", err)
		}
		if !sleepCtx(ctx, time.Second) {
			return adapters.Instance{}, ctx.Err()
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
