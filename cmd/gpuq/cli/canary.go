package cli

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/workers/canary"
)

// Exit statuses of `gpuq canary`.
const (
	// exitCanaryFailed: the canary ran and at least one check failed.
	exitCanaryFailed = 1
	// exitCanaryUsage: the expectations were invalid, so nothing was checked.
	exitCanaryUsage = 2
)

// openNVML gives the canary its NVML; tests replace it with go-nvml's mock.
var openNVML = canary.System

type canaryFlag struct {
	flag, field, usage string
	zero               any
}

// typeName says what a flag's value must be, for error messages.
func typeName(zero any) string {
	switch zero.(type) {
	case int:
		return "a whole number"
	case time.Duration:
		return "a duration such as 30s"
	case bool:
		return "true or false"
	}
	return "text"
}

// canaryFlags are the flags that set Expectations fields; field is the key
// under a pool's `canary` map, and the flag's zero value gives its type.
var canaryFlags = []canaryFlag{
	{"expect-card", "card", "required card, e.g. H100 or A100-80GB; cpu for a CPU-only pool (default: the pool's card under pools in the config file)", ""},
	{"expect-count", "count", "minimum number of GPUs (default: the pool's gpu_count under pools in the config file, else 1 when a card is named)", 0},
	{"expect-driver", "driver", "pinned driver version: 550 pins the branch, 550.54.15 one build", ""},
	{"expect-driver-min", "driver_min", "lowest acceptable driver version, e.g. 535.104", ""},
	{"expect-cuda", "cuda", "lowest CUDA version the driver must support, e.g. 12.4", ""},
	{"min-memory-gb", "min_memory_gb", "least total memory per GPU, in GB of 10^9 bytes", 0},
	{"min-free-memory-gb", "min_free_memory_gb", "least free memory per GPU, in GB of 10^9 bytes", 0},
	{"max-temp-c", "max_temp_c", fmt.Sprintf("hottest a GPU may be, in °C (default %d)", canary.DefaultMaxTempC), 0},
	{"probe", "probe", `shell command that must exit 0, e.g. python -c "import torch; torch.zeros(1).cuda()"`, ""},
	{"probe-timeout", "probe_timeout", fmt.Sprintf("time the probe may take (default %s)", canary.DefaultProbeTimeout), time.Duration(0)},
	{"budget", "budget", fmt.Sprintf("time the whole canary may take (default %s)", canary.DefaultBudget), time.Duration(0)},
	{"allow-no-gpu", "allow_no_gpu", "pass without NVML (a CPU-only node); GPU checks are skipped", false},
}

func newCanaryCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "canary",
		Short: "Check this node's GPUs against a pool's expectations; exit 1 on any failure",
		Long: `Runs the NVML canary a worker runs before it takes work: driver and CUDA
versions, card, device count, memory, ECC errors, retired and remapped pages,
temperature, and an optional probe command. Expectations come from a pool
in the config file (--pool: its card and gpu_count, then its canary section)
and/or from the flags, which win.
Exit status: 0 all checks passed, 1 a check failed, 2 invalid expectations.`,
		Args: cobra.NoArgs,
		RunE: runCanary,
	}
	cmd.Flags().String("pool", "", "read expectations from this pool's canary section of the config key pools")
	addCanaryFlags(cmd)
	return cmd
}

// addCanaryFlags adds the flags that set the canary's expectations.
func addCanaryFlags(cmd *cobra.Command) {
	for _, f := range canaryFlags {
		switch zero := f.zero.(type) {
		case string:
			cmd.Flags().String(f.flag, zero, f.usage)
		case int:
			cmd.Flags().Int(f.flag, zero, f.usage)
		case time.Duration:
			cmd.Flags().Duration(f.flag, zero, f.usage)
		case bool:
			cmd.Flags().Bool(f.flag, zero, f.usage)
		}
	}
}

func runCanary(cmd *cobra.Command, _ []string) error {
	v, format, err := loadConfigFormat(cmd)
	if err != nil {
		return err
	}
	exp, err := canaryExpectations(v)
	if err != nil {
		return &ExitError{Code: exitCanaryUsage, Err: err}
	}
	r := canary.Run(cmd.Context(), openNVML(), exp)
	out := cmd.OutOrStdout()
	if format == "json" {
		err = writeJSON(out, r)
	} else {
		err = writeCanaryTable(cmd, r)
	}
	if err != nil {
		return err
	}
	if !r.OK {
		return &ExitError{Code: exitCanaryFailed, Err: fmt.Errorf("canary failed: %s", r.Summary())}
	}
	return nil
}

// canaryExpectations starts from --pool's canary section, when given, and
// lets each flag that is set (on the command line or as GPUQ_*) override it.
// Both go through the same decoding, and an invalid or unknown value is
// reported under the name the user gave it.
func canaryExpectations(v *viper.Viper) (canary.Expectations, error) {
	return canaryExpectationsFor(v, true)
}

// canaryExpectationsFor is canaryExpectations; a worker's pool need not be
// in the config (poolRequired false), its expectations then come from the
// flags alone.
func canaryExpectationsFor(v *viper.Viper, poolRequired bool) (canary.Expectations, error) {
	fields := map[string]any{}
	source := map[string]string{}
	if pool := v.GetString("pool"); pool != "" && (poolRequired || poolConfigured(v, pool)) {
		entry, err := poolEntryOf(v, pool)
		if err != nil {
			return canary.Expectations{}, err
		}
		// The card the pool is offered as is the card its workers must
		// have, unless its canary section says otherwise.
		if entry.Card != "" {
			fields["card"], source["card"] = entry.Card, fmt.Sprintf("pools[%s].card", pool)
		}
		if entry.GPUCount > 0 {
			fields["count"], source["count"] = entry.GPUCount, fmt.Sprintf("pools[%s].gpu_count", pool)
		}
		for k, val := range entry.Canary {
			fields[k], source[k] = val, fmt.Sprintf("pools[%s].canary.%s", pool, k)
		}
	}
	for _, f := range canaryFlags {
		if v.IsSet(f.flag) {
			fields[f.field], source[f.field] = v.Get(f.flag), "--"+f.flag
		}
	}
	var exp canary.Expectations
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		f := slices.IndexFunc(canaryFlags, func(f canaryFlag) bool { return f.field == k })
		if f < 0 {
			known := make([]string, len(canaryFlags))
			for i, f := range canaryFlags {
				known[i] = f.field
			}
			return exp, fmt.Errorf("%s: unknown key; the canary knows %s", source[k], strings.Join(known, ", "))
		}
		// One key at a time, so that a value of the wrong type is blamed on
		// its own key; viper's decoding turns "30s" into a duration.
		one := viper.New()
		one.Set(k, fields[k])
		if err := one.Unmarshal(&exp); err != nil {
			return exp, fmt.Errorf("%s: cannot read %q as %s", source[k], fmt.Sprint(fields[k]), typeName(canaryFlags[f].zero))
		}
	}
	if err := exp.Validate(); err != nil {
		var fe *canary.FieldError
		if errors.As(err, &fe) && source[fe.Field] != "" {
			return exp, fmt.Errorf("%s: %s", source[fe.Field], fe.Problem)
		}
		return exp, err
	}
	return exp, nil
}

// poolEntry is what the canary reads of a pool under the config key pools:
// the card and GPU count it is offered with, and its canary section.
type poolEntry struct {
	Name     string         `mapstructure:"pool"`
	Card     string         `mapstructure:"card"`
	GPUCount int            `mapstructure:"gpu_count"`
	Canary   map[string]any `mapstructure:"canary"`
}

// poolEntryOf returns the pool named name from the config key pools.
func poolEntryOf(v *viper.Viper, name string) (poolEntry, error) {
	var pools []poolEntry
	if err := v.UnmarshalKey("pools", &pools); err != nil {
		return poolEntry{}, fmt.Errorf("pools: %w", err)
	}
	var names []string
	for _, p := range pools {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	if len(names) == 0 {
		return poolEntry{}, fmt.Errorf("--pool: no pool %q: the config has no pools (set the config key pools, a list of {pool, canary, …})", name)
	}
	slices.Sort(names)
	return poolEntry{}, fmt.Errorf("--pool: no pool %q in the config key pools; have %s", name, strings.Join(names, ", "))
}

// poolConfigured reports whether the config key pools names pool.
func poolConfigured(v *viper.Viper, pool string) bool {
	_, err := poolEntryOf(v, pool)
	return err == nil
}

func writeCanaryTable(cmd *cobra.Command, r canary.Report) error {
	t := newTable(cmd.OutOrStdout(), "CHECK", "STATUS", "EXPECTED", "FOUND", "TIME")
	for _, c := range r.Checks {
		t.row(c.Label(), c.Status, c.Expected, c.Found, roundDuration(c.Duration))
	}
	if err := t.flush(); err != nil {
		return err
	}
	verdict := "passed"
	if !r.OK {
		verdict = fmt.Sprintf("FAILED (%d of %d checks)", len(r.Failures()), len(r.Checks))
	}
	_, err := fmt.Fprintf(cmd.OutOrStdout(), "canary %s in %s (budget %s)\n", verdict, roundDuration(r.Duration), r.Budget)
	return err
}

func roundDuration(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(time.Millisecond)
}
