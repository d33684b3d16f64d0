package canary

import (
	"fmt"
	"strings"
	"time"
)

// Status is the outcome of one check.
type Status string

const (
	// Pass: the found value meets the expectation.
	Pass Status = "pass"
	// Fail: the found value drifted from the expectation, or could not be read.
	Fail Status = "fail"
	// Skip: the check does not apply here (no GPU on a CPU pool, a feature the
	// card does not have); it does not fail the canary.
	Skip Status = "skip"
)

// Check names, as they appear in reports.
const (
	CheckExpectations = "expectations"
	CheckNVML         = "nvml"
	CheckDriver       = "driver"
	CheckCUDA         = "cuda"
	CheckDeviceCount  = "device_count"
	CheckDevice       = "device"
	CheckCard         = "card"
	CheckMemoryTotal  = "memory_total"
	CheckMemoryFree   = "memory_free"
	CheckECC          = "ecc_uncorrected"
	CheckRetiredPages = "retired_pages"
	CheckRemappedRows = "remapped_rows"
	CheckTemperature  = "temperature"
	CheckProbe        = "probe"
	CheckBudget       = "budget"
)

// NoDriver is the found value of the nvml check when libnvidia-ml cannot be
// loaded or the driver is not running.
const NoDriver = "no NVIDIA driver/libnvidia-ml found"

// Result is one check: what was expected, what was found, and how long it took.
type Result struct {
	Name string `json:"name"`
	// GPU is the device index for per-device checks, absent for system checks.
	GPU      *int          `json:"gpu,omitempty"`
	Expected string        `json:"expected"`
	Found    string        `json:"found"`
	Status   Status        `json:"status"`
	Duration time.Duration `json:"duration_ns"`
}

// Label names the check and, for a per-device check, its device: "card[3]".
func (r Result) Label() string {
	if r.GPU == nil {
		return r.Name
	}
	return fmt.Sprintf("%s[%d]", r.Name, *r.GPU)
}

// Device is one GPU as NVML describes it.
type Device struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	UUID  string `json:"uuid,omitempty"`
}

// Report is the outcome of one canary run. It is stored as JSON, so its field
// names are part of the stored format.
type Report struct {
	// OK is true when no check failed.
	OK        bool          `json:"ok"`
	StartedAt time.Time     `json:"started_at"`
	Duration  time.Duration `json:"duration_ns"`
	Budget    time.Duration `json:"budget_ns"`
	// Driver and CUDA are the versions found, empty when NVML is absent.
	Driver  string   `json:"driver,omitempty"`
	CUDA    string   `json:"cuda,omitempty"`
	Devices []Device `json:"devices,omitempty"`
	Checks  []Result `json:"checks"`
}

// Failures returns the failed checks in order.
func (r Report) Failures() []Result {
	var out []Result
	for _, c := range r.Checks {
		if c.Status == Fail {
			out = append(out, c)
		}
	}
	return out
}

// Summary says in one line why the canary failed, or "ok".
func (r Report) Summary() string {
	fails := r.Failures()
	if len(fails) == 0 {
		return "ok"
	}
	parts := make([]string, len(fails))
	for i, f := range fails {
		parts[i] = fmt.Sprintf("%s: expected %s, found %s", f.Label(), f.Expected, f.Found)
	}
	return strings.Join(parts, "; ")
}
