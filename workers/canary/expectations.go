package canary

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpuq/gpuq/adapters"
)

// CPUCard is the card name of a pool without GPUs: its canary passes without
// NVML.
const CPUCard = "cpu"

// Default values that WithDefaults fills in.
const (
	DefaultMaxTempC     = 85
	DefaultBudget       = 60 * time.Second
	DefaultProbeTimeout = 30 * time.Second
)

// Expectations is what a pool requires of its node, read from the `canary`
// sub-map of a pool's configuration. A zero field requires nothing, except
// where its comment gives a default.
type Expectations struct {
	// Card is the required card, matched against every device's name by
	// CardMatches ("H100", "A100-80GB"). "cpu" marks a pool without GPUs,
	// which implies AllowNoGPU. Empty accepts any card.
	Card string `mapstructure:"card" json:"card,omitempty" yaml:"card,omitempty"`
	// Count is the minimum number of devices. Default: 1 when Card names a
	// GPU, else 0.
	Count int `mapstructure:"count" json:"count,omitempty" yaml:"count,omitempty"`
	// Driver pins the driver version: its dotted components must equal the
	// leading components of the installed version, so "550" pins the 550
	// branch and "550.54.15" one build.
	Driver string `mapstructure:"driver" json:"driver,omitempty" yaml:"driver,omitempty"`
	// DriverMin is the lowest acceptable driver version, compared component
	// by component ("535.104").
	DriverMin string `mapstructure:"driver_min" json:"driver_min,omitempty" yaml:"driver_min,omitempty"`
	// CUDA is the lowest CUDA version the driver must support ("12.4").
	CUDA string `mapstructure:"cuda" json:"cuda,omitempty" yaml:"cuda,omitempty"`
	// MinMemoryGB is the least total memory per device, in GB of 10^9 bytes
	// (the unit cards are sold in: an "80GB" card reports more than 80e9).
	MinMemoryGB int `mapstructure:"min_memory_gb" json:"min_memory_gb,omitempty" yaml:"min_memory_gb,omitempty"`
	// MinFreeMemoryGB is the least free memory per device, in GB of 10^9 bytes.
	MinFreeMemoryGB int `mapstructure:"min_free_memory_gb" json:"min_free_memory_gb,omitempty" yaml:"min_free_memory_gb,omitempty"`
	// MaxTempC is the hottest a device may be, in °C. Default: 85.
	MaxTempC int `mapstructure:"max_temp_c" json:"max_temp_c,omitempty" yaml:"max_temp_c,omitempty"`
	// Probe is a shell command (run with /bin/sh -c) that must exit 0, such as
	// a tiny CUDA program or `python -c "import torch; …"`. Empty: no probe.
	Probe string `mapstructure:"probe" json:"probe,omitempty" yaml:"probe,omitempty"`
	// ProbeTimeout bounds the probe. Default: 30s.
	ProbeTimeout time.Duration `mapstructure:"probe_timeout" json:"probe_timeout,omitempty" yaml:"probe_timeout,omitempty"`
	// Budget bounds the whole canary; checks still unfinished when it runs
	// out fail. Default: 60s.
	Budget time.Duration `mapstructure:"budget" json:"budget,omitempty" yaml:"budget,omitempty"`
	// AllowNoGPU lets the canary pass when NVML is absent (a CPU-only node);
	// the GPU checks are then skipped.
	AllowNoGPU bool `mapstructure:"allow_no_gpu" json:"allow_no_gpu,omitempty" yaml:"allow_no_gpu,omitempty"`
}

// CPUOnly reports whether the pool has no GPUs.
func (e Expectations) CPUOnly() bool { return strings.EqualFold(strings.TrimSpace(e.Card), CPUCard) }

// WithDefaults returns e with its unset fields given their defaults.
func (e Expectations) WithDefaults() Expectations {
	if e.CPUOnly() {
		e.AllowNoGPU = true
	}
	if e.Count == 0 && e.Card != "" && !e.CPUOnly() {
		e.Count = 1
	}
	if e.MaxTempC == 0 {
		e.MaxTempC = DefaultMaxTempC
	}
	if e.ProbeTimeout == 0 {
		e.ProbeTimeout = DefaultProbeTimeout
	}
	if e.Budget == 0 {
		e.Budget = DefaultBudget
	}
	return e
}

// FieldError is an invalid expectation; Field is its configuration key.
type FieldError struct {
	Field   string
	Problem string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// Validate reports the first invalid field as a *FieldError.
func (e Expectations) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
	}
	if e.Card != "" && len(adapters.CardTokens(e.Card)) == 0 {
		return bad("card", "must name a card such as H100 or A100-80GB, got %q", e.Card)
	}
	if e.Count < 0 || e.Count > 64 {
		return bad("count", "must be 0–64, got %d", e.Count)
	}
	if e.CPUOnly() && e.Count > 0 {
		return bad("count", "a cpu pool has no GPUs to count, got %d", e.Count)
	}
	for _, v := range []struct{ field, value, example string }{
		{"driver", e.Driver, "550 or 550.54.15"},
		{"driver_min", e.DriverMin, "535 or 535.104.05"},
		{"cuda", e.CUDA, "12.4"},
	} {
		if v.value == "" {
			continue
		}
		if e.CPUOnly() {
			return bad(v.field, "a cpu pool has no GPU driver to check; remove it or name a card")
		}
		if _, err := parseVersion(v.value); err != nil {
			return bad(v.field, "must be a dotted version such as %s, got %q", v.example, v.value)
		}
	}
	if e.CUDA != "" {
		if parts, _ := parseVersion(e.CUDA); len(parts) > 2 {
			return bad("cuda", "must be major or major.minor such as 12.4, got %q", e.CUDA)
		}
	}
	if e.Driver != "" && e.DriverMin != "" {
		pin, _ := parseVersion(e.Driver)
		low, _ := parseVersion(e.DriverMin)
		if compareVersions(pin, low) < 0 && !hasPrefix(low, pin) {
			return bad("driver", "pins %s, below driver_min %s", e.Driver, e.DriverMin)
		}
	}
	if e.MinMemoryGB < 0 {
		return bad("min_memory_gb", "must be ≥ 0, got %d", e.MinMemoryGB)
	}
	if e.MinFreeMemoryGB < 0 {
		return bad("min_free_memory_gb", "must be ≥ 0, got %d", e.MinFreeMemoryGB)
	}
	if e.MaxTempC < 0 || e.MaxTempC > 120 {
		return bad("max_temp_c", "must be 1–120 (0 for the default %d), got %d", DefaultMaxTempC, e.MaxTempC)
	}
	if e.ProbeTimeout < 0 {
		return bad("probe_timeout", "must be positive, got %s", e.ProbeTimeout)
	}
	if e.Budget < 0 {
		return bad("budget", "must be positive, got %s", e.Budget)
	}
	return nil
}

// parseVersion splits "550.54.15" into [550 54 15].
func parseVersion(s string) ([]int, error) {
	fields := strings.Split(strings.TrimSpace(s), ".")
	out := make([]int, len(fields))
	for i, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || f == "" || f[0] == '+' {
			return nil, fmt.Errorf("version %q: component %q is not a number", s, f)
		}
		out[i] = n
	}
	return out, nil
}

// compareVersions orders versions component by component, missing components
// counting as 0.
func compareVersions(a, b []int) int {
	for i := 0; i < max(len(a), len(b)); i++ {
		var x, y int
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// hasPrefix reports whether version v starts with the components of pin.
func hasPrefix(v, pin []int) bool {
	if len(pin) > len(v) {
		return false
	}
	for i := range pin {
		if v[i] != pin[i] {
			return false
		}
	}
	return true
}

// cudaVersion converts NVML's CUDA driver version (12040) to "12.4".
func cudaVersion(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }
