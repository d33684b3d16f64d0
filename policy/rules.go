package policy

import (
	"fmt"
	"math"
	"path"
	"slices"
	"strings"
	"time"
)

// Rules is the organisation's placement configuration. Its fields carry
// json, yaml and mapstructure tags so it can be loaded with viper; Money
// fields are written "2.50 EUR" and need a decoder that honours
// encoding.TextUnmarshaler.
type Rules struct {
	// BaseCurrency is the currency costs are compared and reported in.
	// Default EUR.
	BaseCurrency string `json:"base_currency,omitempty" yaml:"base_currency" mapstructure:"base_currency"`
	// ExchangeRates gives the value of one unit of a currency in
	// BaseCurrency, e.g. USD: 0.92 with base EUR.
	ExchangeRates map[string]float64 `json:"exchange_rates,omitempty" yaml:"exchange_rates" mapstructure:"exchange_rates"`
	// ResidencyClasses defines classes beyond the built-ins EU, EEA, CH and
	// UK. A member is an alpha-2 country code or a built-in class name.
	// Names are case-insensitive.
	ResidencyClasses map[string][]string `json:"residency_classes,omitempty" yaml:"residency_classes" mapstructure:"residency_classes"`
	Rules            []Rule              `json:"rules,omitempty" yaml:"rules" mapstructure:"rules"`
	Budgets          []Budget            `json:"budgets,omitempty" yaml:"budgets" mapstructure:"budgets"`
	Spot             SpotModel           `json:"spot" yaml:"spot" mapstructure:"spot"`
	Replacement      ReplacementRules    `json:"replacement" yaml:"replacement" mapstructure:"replacement"`
	// DefaultExpectedDuration is the run time assumed for a job that gives
	// neither an expected duration nor a deadline. Default 1h.
	DefaultExpectedDuration time.Duration `json:"default_expected_duration,omitempty" yaml:"default_expected_duration" mapstructure:"default_expected_duration"`
	// MinChargedDuration is the least run time a job's cost is estimated
	// for, so that a job saying `expected_duration: 1s` reserves a
	// meaningful part of its project's budget. Default 1m.
	MinChargedDuration time.Duration `json:"min_charged_duration,omitempty" yaml:"min_charged_duration" mapstructure:"min_charged_duration"`
	// MaxAlternatives caps the ranked plan B kept in a decision. Default 10.
	MaxAlternatives int `json:"max_alternatives,omitempty" yaml:"max_alternatives" mapstructure:"max_alternatives"`
	// EgressPrices are what moving a GB of a job's input out of where it is
	// stored costs; the first entry matching the input's provider and
	// region applies (an input that names no provider matches on its
	// region alone). An input no entry matches is priced at the egress its
	// provider's offers in its region state.
	EgressPrices []EgressPrice `json:"egress_prices,omitempty" yaml:"egress_prices" mapstructure:"egress_prices"`
}

// EgressPrice is the egress price of the regions matching Region at the
// providers matching Provider (globs; empty matches all).
type EgressPrice struct {
	Provider string `json:"provider,omitempty" yaml:"provider" mapstructure:"provider"`
	Region   string `json:"region,omitempty" yaml:"region" mapstructure:"region"`
	PerGB    Money  `json:"per_gb" yaml:"per_gb" mapstructure:"per_gb"`
}

// Rule applies to every job whose project matches Project and whose labels
// match Labels (both optional; a rule with neither applies to all jobs).
type Rule struct {
	Name string `json:"name" yaml:"name" mapstructure:"name"`
	// Project is a glob over project names.
	Project string `json:"project,omitempty" yaml:"project" mapstructure:"project"`
	// Labels must all be present on the job; values are globs and keys are
	// compared case-insensitively.
	Labels map[string]string `json:"labels,omitempty" yaml:"labels" mapstructure:"labels"`
	// Residency names the class matching jobs must stay in.
	Residency string `json:"residency,omitempty" yaml:"residency" mapstructure:"residency"`
	// AllowProviders, when set, lists the only provider globs matching jobs
	// may use; DenyProviders lists provider globs they may not use.
	AllowProviders []string `json:"allow_providers,omitempty" yaml:"allow_providers" mapstructure:"allow_providers"`
	DenyProviders  []string `json:"deny_providers,omitempty" yaml:"deny_providers" mapstructure:"deny_providers"`
	// AllowGPUForCPU lets matching CPU-only jobs use GPU pools, ranked
	// after every CPU pool, as the job's placement.allow_gpu_for_cpu does.
	AllowGPUForCPU bool `json:"allow_gpu_for_cpu,omitempty" yaml:"allow_gpu_for_cpu" mapstructure:"allow_gpu_for_cpu"`
	// ResidentInputs refuses a matching job whose inputs are stored
	// outside its residency (or in a country that is unknown); without it
	// such an input is noted on the decision.
	ResidentInputs bool `json:"resident_inputs,omitempty" yaml:"resident_inputs" mapstructure:"resident_inputs"`
}

// Budget caps what the projects matching Project may spend in a period.
// Spent and Reserved are what the current period has used and promised so
// far; the caller fills them in.
type Budget struct {
	Project  string `json:"project" yaml:"project" mapstructure:"project"`
	Cap      Money  `json:"cap" yaml:"cap" mapstructure:"cap"`
	Period   string `json:"period" yaml:"period" mapstructure:"period"`
	Spent    Money  `json:"spent" yaml:"spent" mapstructure:"spent"`
	Reserved Money  `json:"reserved" yaml:"reserved" mapstructure:"reserved"`
}

// SpotModel is how the cost model prices interruptions of spot capacity.
type SpotModel struct {
	// RestartOverhead is the run time lost per preemption (restore plus
	// work since the last checkpoint). Default 10m.
	RestartOverhead time.Duration `json:"restart_overhead,omitempty" yaml:"restart_overhead" mapstructure:"restart_overhead"`
	// AssumedPreemptionRate (per hour) stands in for an offer that states
	// none; the estimate is flagged. Default 0.1.
	AssumedPreemptionRate float64 `json:"assumed_preemption_rate,omitempty" yaml:"assumed_preemption_rate" mapstructure:"assumed_preemption_rate"`
}

// ReplacementRules drive Replace.
type ReplacementRules struct {
	// EscalateAfter preemptions within Window move a spot-then-on-demand
	// job to on-demand. Defaults 3 and 6h.
	EscalateAfter int           `json:"escalate_after,omitempty" yaml:"escalate_after" mapstructure:"escalate_after"`
	Window        time.Duration `json:"window,omitempty" yaml:"window" mapstructure:"window"`
	// AvoidFor is how long a pool that preempted the job or had no
	// capacity is avoided. Default 1h.
	AvoidFor time.Duration `json:"avoid_for,omitempty" yaml:"avoid_for" mapstructure:"avoid_for"`
}

var budgetPeriods = []string{"day", "week", "month", "quarter", "year", "total"}

// WithDefaults returns r with every unset default filled in.
func (r Rules) WithDefaults() Rules {
	if r.BaseCurrency == "" {
		r.BaseCurrency = "EUR"
	}
	if r.Spot.RestartOverhead == 0 {
		r.Spot.RestartOverhead = 10 * time.Minute
	}
	if r.Spot.AssumedPreemptionRate == 0 {
		r.Spot.AssumedPreemptionRate = 0.1
	}
	if r.Replacement.EscalateAfter == 0 {
		r.Replacement.EscalateAfter = 3
	}
	if r.Replacement.Window == 0 {
		r.Replacement.Window = 6 * time.Hour
	}
	if r.Replacement.AvoidFor == 0 {
		r.Replacement.AvoidFor = time.Hour
	}
	if r.DefaultExpectedDuration == 0 {
		r.DefaultExpectedDuration = time.Hour
	}
	if r.MinChargedDuration == 0 {
		r.MinChargedDuration = time.Minute
	}
	if r.MaxAlternatives == 0 {
		r.MaxAlternatives = 10
	}
	return r
}

// Validate refuses a configuration that cannot be applied, naming the key:
// `rules[2].residency: undefined residency class "EUU"`.
func (r Rules) Validate() error {
	_, err := compile(r)
	return err
}

// classSet resolves a class name. seen guards against definitions that
// refer to themselves.
func (r Rules) classSet(name string, seen []string) (countrySet, error) {
	up := strings.ToUpper(name)
	if set, ok := builtinClasses[up]; ok {
		return set, nil
	}
	for defined, members := range r.ResidencyClasses {
		if strings.ToUpper(defined) != up {
			continue
		}
		if slices.Contains(seen, up) {
			return countrySet{}, fmt.Errorf("residency class %q refers to itself", name)
		}
		var set countrySet
		for i, m := range members {
			mu := strings.ToUpper(m)
			if b, ok := builtinClasses[mu]; ok {
				set = orSet(set, b)
				continue
			}
			if _, isCountry := countryIndex(mu); isCountry {
				set.add(mu)
				continue
			}
			sub, err := r.classSet(mu, append(seen, up))
			if err != nil {
				return countrySet{}, fmt.Errorf("residency_classes.%s[%d]: %q is neither an ISO 3166-1 alpha-2 country code nor a residency class", defined, i, m)
			}
			set = orSet(set, sub)
		}
		return set, nil
	}
	return countrySet{}, fmt.Errorf("undefined residency class %q", name)
}

func orSet(a, b countrySet) countrySet {
	for i := range a {
		a[i] |= b[i]
	}
	return a
}

// compiled is Rules checked and prepared for placing many jobs.
type compiled struct {
	Rules
	rates   rates
	classes map[string]countrySet
	budgets []compiledBudget
	// egress holds EgressPrices' prices in base micros per GB.
	egress []int64
}

type compiledBudget struct {
	Budget
	remaining int64 // base-currency micros; may be negative
}

// compile validates r and resolves classes, rates and budgets.
func compile(r Rules) (*compiled, error) {
	r = r.WithDefaults()
	c := &compiled{Rules: r, classes: map[string]countrySet{}}
	if !validCurrency(r.BaseCurrency) {
		return nil, fmt.Errorf("base_currency: %q is not an ISO 4217 currency code", r.BaseCurrency)
	}
	c.rates = rates{base: r.BaseCurrency, rate: map[string]int64{}}
	for _, cur := range sortedKeys(r.ExchangeRates) {
		v := r.ExchangeRates[cur]
		up := strings.ToUpper(cur)
		if !validCurrency(up) {
			return nil, fmt.Errorf("exchange_rates.%s: not an ISO 4217 currency code", cur)
		}
		if !(v > 0) || v > 1e6 {
			return nil, fmt.Errorf("exchange_rates.%s: must be a positive number, got %v", cur, v)
		}
		c.rates.set(up, int64(math.Round(v*microsPerUnit)))
	}
	for name := range builtinClasses {
		c.classes[name] = builtinClasses[name]
	}
	for _, name := range sortedKeys(r.ResidencyClasses) {
		up := strings.ToUpper(name)
		if _, ok := builtinClasses[up]; ok {
			return nil, fmt.Errorf("residency_classes.%s: redefines the built-in class %s", name, up)
		}
		if len(r.ResidencyClasses[name]) == 0 {
			return nil, fmt.Errorf("residency_classes.%s: must list at least one country", name)
		}
		set, err := r.classSet(name, nil)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "residency_classes.") {
				err = fmt.Errorf("residency_classes.%s: %w", name, err)
			}
			return nil, err
		}
		c.classes[up] = set
	}
	// Rules are compiled for every decision, so their keys are worded only
	// for an error.
	for i, rule := range r.Rules {
		key := func(field string) string { return fmt.Sprintf("rules[%d].%s", i, field) }
		if rule.Name == "" {
			return nil, fmt.Errorf("%s: must be set", key("name"))
		}
		if rule.Project != "" && !validGlob(rule.Project) {
			return nil, globError(key("project"), rule.Project)
		}
		for _, v := range rule.Labels {
			if validGlob(v) {
				continue
			}
			// Report the first bad label in key order, whatever the map's.
			for _, k := range sortedKeys(rule.Labels) {
				if !validGlob(rule.Labels[k]) {
					return nil, globError(key("labels."+k), rule.Labels[k])
				}
			}
		}
		if rule.Residency != "" {
			if _, ok := c.classes[strings.ToUpper(rule.Residency)]; !ok {
				return nil, fmt.Errorf("%s: undefined residency class %q; known classes: %s", key("residency"), rule.Residency, c.classNames())
			}
		}
		if !validGlobs(rule.AllowProviders) {
			return nil, checkGlobs(key("allow_providers"), rule.AllowProviders)
		}
		if !validGlobs(rule.DenyProviders) {
			return nil, checkGlobs(key("deny_providers"), rule.DenyProviders)
		}
	}
	for i, b := range r.Budgets {
		key := fmt.Sprintf("budgets[%d]", i)
		if b.Project == "" {
			return nil, fmt.Errorf("%s.project: must be set", key)
		}
		if !validGlob(b.Project) {
			return nil, globError(key+".project", b.Project)
		}
		if !slices.Contains(budgetPeriods, b.Period) {
			return nil, fmt.Errorf("%s.period: must be one of %s, got %q", key, strings.Join(budgetPeriods, ", "), b.Period)
		}
		remaining := int64(0)
		for _, f := range []struct {
			name string
			m    Money
			sign int64
		}{{"cap", b.Cap, 1}, {"spent", b.Spent, -1}, {"reserved", b.Reserved, -1}} {
			if f.m.Currency == "" && f.m.Micros == 0 && f.name != "cap" {
				continue
			}
			if f.m.Micros < 0 {
				return nil, fmt.Errorf("%s.%s: must not be negative, got %s", key, f.name, f.m)
			}
			v, ok := c.rates.toBase(f.m)
			if !ok {
				return nil, fmt.Errorf("%s.%s: unknown currency %q (not %s and not in exchange_rates)", key, f.name, f.m.Currency, r.BaseCurrency)
			}
			remaining += f.sign * v
		}
		c.budgets = append(c.budgets, compiledBudget{Budget: b, remaining: remaining})
	}
	for i, e := range r.EgressPrices {
		key := fmt.Sprintf("egress_prices[%d]", i)
		if !validGlob(e.Provider) {
			return nil, globError(key+".provider", e.Provider)
		}
		if !validGlob(e.Region) {
			return nil, globError(key+".region", e.Region)
		}
		if e.PerGB.Micros < 0 {
			return nil, fmt.Errorf("%s.per_gb: must not be negative, got %s", key, e.PerGB)
		}
		v, ok := c.rates.toBase(e.PerGB)
		if !ok {
			return nil, fmt.Errorf("%s.per_gb: unknown currency %q (not %s and not in exchange_rates)", key, e.PerGB.Currency, r.BaseCurrency)
		}
		c.egress = append(c.egress, v)
	}
	switch {
	case r.Spot.RestartOverhead < 0:
		return nil, fmt.Errorf("spot.restart_overhead: must not be negative, got %s", r.Spot.RestartOverhead)
	case r.Spot.AssumedPreemptionRate < 0:
		return nil, fmt.Errorf("spot.assumed_preemption_rate: must not be negative, got %v", r.Spot.AssumedPreemptionRate)
	case r.Replacement.EscalateAfter < 0:
		return nil, fmt.Errorf("replacement.escalate_after: must be 1 or more, got %d", r.Replacement.EscalateAfter)
	case r.Replacement.Window < 0:
		return nil, fmt.Errorf("replacement.window: must not be negative, got %s", r.Replacement.Window)
	case r.Replacement.AvoidFor < 0:
		return nil, fmt.Errorf("replacement.avoid_for: must not be negative, got %s", r.Replacement.AvoidFor)
	case r.DefaultExpectedDuration < 0:
		return nil, fmt.Errorf("default_expected_duration: must not be negative, got %s", r.DefaultExpectedDuration)
	case r.MinChargedDuration < 0:
		return nil, fmt.Errorf("min_charged_duration: must not be negative, got %s", r.MinChargedDuration)
	case r.MaxAlternatives < 0:
		return nil, fmt.Errorf("max_alternatives: must be 0 or more, got %d", r.MaxAlternatives)
	}
	return c, nil
}

// classNames lists the residency classes defined, built-ins first.
func (c *compiled) classNames() string {
	names := []string{"EU", "EEA", "CH", "UK"}
	for _, n := range sortedKeys(c.classes) {
		if _, builtin := builtinClasses[n]; !builtin {
			names = append(names, n)
		}
	}
	return strings.Join(names, ", ")
}

// matches reports whether rule applies to job.
func (rule Rule) matches(job Requirements) bool {
	if rule.Project != "" {
		if ok, _ := path.Match(rule.Project, job.Project); !ok {
			return false
		}
	}
	for k, want := range rule.Labels {
		found := false
		for jk, v := range job.Labels {
			if strings.EqualFold(jk, k) {
				found, _ = path.Match(want, v)
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
