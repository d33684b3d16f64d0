package policy

import (
	"fmt"
	"path"
	"time"
)

// Tier is the kind of capacity a job accepts.
type Tier string

const (
	// TierSpot accepts only spot (preemptible) capacity.
	TierSpot Tier = "spot"
	// TierOnDemand accepts only on-demand capacity; it is the default.
	TierOnDemand Tier = "on-demand"
	// TierSpotThenOnDemand accepts both; re-placement stops offering spot
	// after too many preemptions (Rules.Replacement).
	TierSpotThenOnDemand Tier = "spot-then-on-demand"
)

// Requirements are what placement needs to know about a job: its resources,
// where it may run, what it may cost and when it must finish. The control
// plane converts a job spec into Requirements (queue/control.PolicyJob).
type Requirements struct {
	Project string            `json:"project" yaml:"project" mapstructure:"project"`
	Labels  map[string]string `json:"labels,omitempty" yaml:"labels" mapstructure:"labels"`
	// GPUCount is the number of GPUs the job needs on one machine; 0 for a
	// CPU-only job.
	GPUCount int `json:"gpu_count" yaml:"gpu_count" mapstructure:"gpu_count"`
	// Cards lists the accepted cards in order of preference; empty accepts
	// any card.
	Cards          []string `json:"cards,omitempty" yaml:"cards" mapstructure:"cards"`
	MinGPUMemoryGB int      `json:"min_gpu_memory_gb,omitempty" yaml:"min_gpu_memory_gb" mapstructure:"min_gpu_memory_gb"`
	VCPU           int      `json:"vcpu,omitempty" yaml:"vcpu" mapstructure:"vcpu"`
	MemoryGB       int      `json:"memory_gb,omitempty" yaml:"memory_gb" mapstructure:"memory_gb"`
	// Tier defaults to on-demand.
	Tier Tier `json:"tier,omitempty" yaml:"tier" mapstructure:"tier"`
	// Providers and Regions are globs (path.Match syntax); empty allows all.
	Providers []string `json:"providers,omitempty" yaml:"providers" mapstructure:"providers"`
	Regions   []string `json:"regions,omitempty" yaml:"regions" mapstructure:"regions"`
	// Residency names the class the job asks for; matching rules may narrow
	// it further, never widen it.
	Residency       string `json:"residency,omitempty" yaml:"residency" mapstructure:"residency"`
	MaxPricePerHour *Money `json:"max_price_per_hour,omitempty" yaml:"max_price_per_hour" mapstructure:"max_price_per_hour"`
	Budget          *Money `json:"budget,omitempty" yaml:"budget" mapstructure:"budget"`
	// Deadline is when the job must be finished; zero means none.
	Deadline time.Time `json:"deadline,omitzero" yaml:"deadline" mapstructure:"deadline"`
	// ExpectedDuration is the job's run time without interruptions; zero
	// means until the deadline, or Rules.DefaultExpectedDuration.
	ExpectedDuration time.Duration `json:"expected_duration,omitempty" yaml:"expected_duration" mapstructure:"expected_duration"`
	// Timeout is the longest one attempt may run (the spec's timeout);
	// zero means none. The run time a job is charged for never exceeds it.
	Timeout time.Duration `json:"timeout,omitempty" yaml:"timeout" mapstructure:"timeout"`
	Inputs  []Input       `json:"inputs,omitempty" yaml:"inputs" mapstructure:"inputs"`
	// AllowGPUForCPU lets a CPU-only job (GPUCount 0) use GPU pools, ranked
	// after every CPU pool. Without it, or a matching rule that allows it,
	// a CPU-only job is placed on CPU pools only.
	AllowGPUForCPU bool `json:"allow_gpu_for_cpu,omitempty" yaml:"allow_gpu_for_cpu" mapstructure:"allow_gpu_for_cpu"`
	// DataResidency lists the residencies the data the job reads is bound
	// to, beyond its own: the outputs of another job carry that job's
	// residency. The job is placed inside each.
	DataResidency []DataResidency `json:"data_residency,omitempty" yaml:"data_residency" mapstructure:"data_residency"`
}

// DataResidency is the residency data the job reads is bound to: the
// countries it may be taken to, the class they make up, and whose data it
// is ("inputs[0] (job …)").
type DataResidency struct {
	Class     string   `json:"class" yaml:"class" mapstructure:"class"`
	Countries []string `json:"countries" yaml:"countries" mapstructure:"countries"`
	By        string   `json:"by" yaml:"by" mapstructure:"by"`
}

// Input is a data set the job reads. Moving it out of its region costs
// egress, billed by the provider where it is stored: the price comes from
// Rules.EgressPrices, or else from that provider's offers in that region.
type Input struct {
	Name string `json:"name,omitempty" yaml:"name" mapstructure:"name"`
	// Provider stores the data; empty means any provider with offers in
	// Region.
	Provider string `json:"provider,omitempty" yaml:"provider" mapstructure:"provider"`
	Region   string `json:"region" yaml:"region" mapstructure:"region"`
	// Country is the ISO 3166-1 alpha-2 code of Region; when empty, the
	// country the offers in Region state.
	Country string `json:"country,omitempty" yaml:"country" mapstructure:"country"`
	Bytes   int64  `json:"bytes" yaml:"bytes" mapstructure:"bytes"`
}

// Validate checks the job on its own, naming the field at fault.
func (j Requirements) Validate() error {
	switch {
	case j.GPUCount < 0:
		return fmt.Errorf("job.gpu_count: must be 0 or more, got %d", j.GPUCount)
	case j.MinGPUMemoryGB < 0:
		return fmt.Errorf("job.min_gpu_memory_gb: must be 0 or more, got %d", j.MinGPUMemoryGB)
	case j.VCPU < 0:
		return fmt.Errorf("job.vcpu: must be 0 or more, got %d", j.VCPU)
	case j.MemoryGB < 0:
		return fmt.Errorf("job.memory_gb: must be 0 or more, got %d", j.MemoryGB)
	case j.ExpectedDuration < 0:
		return fmt.Errorf("job.expected_duration: must not be negative, got %s", j.ExpectedDuration)
	case j.Timeout < 0:
		return fmt.Errorf("job.timeout: must not be negative, got %s", j.Timeout)
	}
	switch j.Tier {
	case "", TierSpot, TierOnDemand, TierSpotThenOnDemand:
	default:
		return fmt.Errorf("job.tier: must be spot, on-demand or spot-then-on-demand, got %q", j.Tier)
	}
	if !validGlobs(j.Providers) {
		return checkGlobs("job.providers", j.Providers)
	}
	if !validGlobs(j.Regions) {
		return checkGlobs("job.regions", j.Regions)
	}
	for _, f := range []struct {
		key string
		m   *Money
	}{{"job.max_price_per_hour", j.MaxPricePerHour}, {"job.budget", j.Budget}} {
		if f.m != nil && (f.m.Micros < 0 || !validCurrency(f.m.Currency)) {
			return fmt.Errorf("%s: want a non-negative amount in an ISO 4217 currency, got %s", f.key, f.m)
		}
	}
	for i, in := range j.Inputs {
		if in.Bytes < 0 {
			return fmt.Errorf("job.inputs[%d].bytes: must be 0 or more, got %d", i, in.Bytes)
		}
		if _, err := NormalizeCountry(in.Country); err != nil {
			return fmt.Errorf("job.inputs[%d].country: %w", i, err)
		}
	}
	for i, r := range j.DataResidency {
		if r.Class == "" || r.By == "" {
			return fmt.Errorf("job.data_residency[%d]: must name its class and whose data it is (by)", i)
		}
		for k, c := range r.Countries {
			if n, err := NormalizeCountry(c); err != nil || n == "" {
				return fmt.Errorf("job.data_residency[%d].countries[%d]: want an ISO 3166-1 alpha-2 code, got %q", i, k, c)
			}
		}
	}
	return nil
}

// tier returns the job's tier with the default applied.
func (j Requirements) tier() Tier {
	if j.Tier == "" {
		return TierOnDemand
	}
	return j.Tier
}

// checkGlobs refuses malformed patterns, naming key[i].
func checkGlobs(key string, globs []string) error {
	for i, g := range globs {
		if !validGlob(g) {
			return globError(fmt.Sprintf("%s[%d]", key, i), g)
		}
	}
	return nil
}

func validGlobs(globs []string) bool {
	for _, g := range globs {
		if !validGlob(g) {
			return false
		}
	}
	return true
}

func validGlob(g string) bool {
	_, err := path.Match(g, "")
	return err == nil
}

func globError(key, g string) error { return fmt.Errorf("%s: malformed glob %q", key, g) }

// matchAny reports whether s matches one of globs; empty globs match all.
func matchAny(globs []string, s string) bool {
	if len(globs) == 0 {
		return true
	}
	for _, g := range globs {
		if ok, _ := path.Match(g, s); ok {
			return true
		}
	}
	return false
}
