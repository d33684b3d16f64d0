package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

func newPlanCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan -f job.yaml [--offers offers.yaml] [--policy policy.yaml]",
		Short: "Show where a job would run and why: chosen offer, plan B, rejections, cost",
		Long: `plan places a job without submitting it. It prints the chosen offer, the ranked
alternatives, every rejected offer with every reason, and the cost breakdown.
Offers come from --offers, or else from the configured local pools (config key
"pools"). Rules come from --policy, or else from the config key "policy".
When no offer is feasible, plan prints the rejections and exits with status 2.`,
		Args: cobra.NoArgs,
		RunE: runPlan,
	}
	cmd.Flags().StringP("file", "f", "", "job spec file (YAML or JSON)")
	cmd.Flags().String("offers", "", "offers file (YAML or JSON, key \"offers\"); default: the configured pools")
	cmd.Flags().String("policy", "", "placement rules file (YAML or JSON); default: the config key \"policy\"")
	return cmd
}

func runPlan(cmd *cobra.Command, _ []string) error {
	v, format, err := loadConfigFormat(cmd)
	if err != nil {
		return err
	}
	if v.GetString("file") == "" {
		return errors.New("--file: the job spec file is required")
	}
	job, err := planJobFromFile(v.GetString("file"))
	if err != nil {
		return err
	}
	rules, err := loadRules(v)
	if err != nil {
		return err
	}
	offers, err := loadOffers(cmd, v)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	d, err := control.Decide(control.Question{Job: job, SubmittedAt: now, Rules: rules, Offers: offers, Now: now})
	var refusal *policy.NoPlacementError
	if errors.As(err, &refusal) {
		out := cmd.OutOrStdout()
		if format == "json" {
			if werr := writeJSON(out, refusal); werr != nil {
				return werr
			}
		} else if werr := printRejected(out, refusal.Decision); werr != nil {
			return werr
		}
		return &ExitError{Code: 2, Err: err}
	}
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(cmd.OutOrStdout(), d)
	}
	return printDecision(cmd.OutOrStdout(), d)
}

// configDecodeHook lets config files write money as "2.50 EUR" and
// durations as "6h".
func configDecodeHook() viper.DecoderConfigOption {
	return func(c *mapstructure.DecoderConfig) {
		c.DecodeHook = mapstructure.ComposeDecodeHookFunc(
			mapstructure.TextUnmarshallerHookFunc(),
			mapstructure.StringToTimeDurationHookFunc(),
		)
		c.ErrorUnused = true
	}
}

// loadRules reads the placement rules and refuses invalid ones, naming the
// key.
func loadRules(v *viper.Viper) (policy.Rules, error) {
	var rules policy.Rules
	if path := v.GetString("policy"); path != "" {
		f := viper.New()
		f.SetConfigFile(path)
		if err := f.ReadInConfig(); err != nil {
			return rules, fmt.Errorf("reading policy file %s: %w", path, err)
		}
		if err := f.Unmarshal(&rules, configDecodeHook()); err != nil {
			return rules, fmt.Errorf("policy file %s: %w", path, err)
		}
		if err := rules.Validate(); err != nil {
			return rules, fmt.Errorf("policy file %s: %w", path, err)
		}
		return rules, nil
	}
	if v.IsSet("policy") {
		if _, isFlag := v.Get("policy").(string); !isFlag {
			if err := v.UnmarshalKey("policy", &rules, configDecodeHook()); err != nil {
				return rules, fmt.Errorf("config key policy: %w", err)
			}
		}
	}
	if err := rules.Validate(); err != nil {
		return rules, fmt.Errorf("config key policy.%w", err)
	}
	return rules, nil
}

// loadOffers reads --offers, or else asks the same offer sources the
// scheduler places among.
func loadOffers(cmd *cobra.Command, v *viper.Viper) (*control.Offers, error) {
	if path := v.GetString("offers"); path != "" {
		f := viper.New()
		f.SetConfigFile(path)
		if err := f.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("reading offers file %s: %w", path, err)
		}
		var file struct {
			Offers []policy.Offer `mapstructure:"offers"`
		}
		if err := f.Unmarshal(&file, configDecodeHook()); err != nil {
			return nil, fmt.Errorf("offers file %s: %w", path, err)
		}
		for i, o := range file.Offers {
			if err := o.Validate(); err != nil {
				return nil, fmt.Errorf("offers file %s: offers[%d].%w", path, i, err)
			}
		}
		return control.NewOffers(file.Offers), nil
	}
	sources, err := offerSources(v)
	if err != nil {
		return nil, err
	}
	return control.CollectOffers(cmd.Context(), sources)
}

// planJobFromFile reads a job spec with the same strict parser as gpuq
// submit and converts it into placement requirements.
func planJobFromFile(path string) (policy.Requirements, error) {
	data, err := readLimited(path, queue.MaxSpecBytes+1)
	if err != nil {
		return policy.Requirements{}, fmt.Errorf("reading job spec: %w", err)
	}
	spec, err := queue.ParseSpec(data)
	if err != nil {
		return policy.Requirements{}, fmt.Errorf("job spec %s: %w", path, err)
	}
	job, err := control.PolicyJob(spec)
	if err != nil {
		return job, fmt.Errorf("job spec %s: %w", path, err)
	}
	if err := job.Validate(); err != nil {
		return job, fmt.Errorf("job spec %s: %w", path, specKey(err))
	}
	return job, nil
}

// specKey renames policy.Requirements's field names in err to the job spec's keys.
func specKey(err error) error {
	r := strings.NewReplacer(
		"job.gpu_count", "resources.gpu.count", "job.min_gpu_memory_gb", "resources.gpu.memory_gb",
		"job.vcpu", "resources.cpu", "job.memory_gb", "resources.memory_gb", "job.tier", "placement.tier",
		"job.providers", "placement.providers", "job.regions", "placement.regions",
		"job.expected_duration", "expected_duration", "job.inputs", "inputs",
		"job.max_price_per_hour", "budget.max_price_per_hour", "job.budget", "budget.total",
	)
	return errors.New(r.Replace(err.Error()))
}

func printDecision(w io.Writer, d policy.Decision) error {
	c := d.Chosen
	fmt.Fprintf(w, "residency:  %s\n", describeResidency(d.Residency))
	fmt.Fprintf(w, "chosen:     %s (%s)\n", c.Offer.Pool, describeOffer(c.Offer))
	fmt.Fprintf(w, "cost:       %s = compute %s + spot overhead %s + egress %s over %s\n",
		c.Cost.Total, c.Cost.Compute, c.Cost.SpotOverhead, c.Cost.Egress, c.Cost.RunTime.Round(time.Minute))
	for _, n := range append(c.Cost.Notes, d.Notes...) {
		fmt.Fprintf(w, "note:       %s\n", n)
	}
	fmt.Fprintf(w, "feasible:   %d of %d offers\n\n", d.Feasible, d.Feasible+len(d.Rejected))
	t := newTable(w, "RANK", "POOL", "PROVIDER", "REGION", "COUNTRY", "CARD", "TIER", "PRICE/H", "TOTAL", "AVAILABILITY")
	for _, a := range append([]policy.Candidate{*c}, d.Alternatives...) {
		o := a.Offer
		t.row(a.Rank, o.Pool, o.Provider, o.Region, o.Country, fmt.Sprintf("%s×%d", o.Card, o.GPUCount), o.Tier,
			o.PricePerHour, a.Cost.Total, o.Availability)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(d.Rejected) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	return printRejected(w, d)
}

func printRejected(w io.Writer, d policy.Decision) error {
	t := newTable(w, "REJECTED", "PROVIDER", "REGION", "REASONS")
	for _, r := range d.Rejected {
		msgs := make([]string, len(r.Reasons))
		for i, k := range r.Reasons {
			msgs[i] = d.Reasons[k].Message
		}
		o := d.Offers[r.Offer]
		t.row(o.Pool, o.Provider, o.Region, strings.Join(msgs, "; "))
	}
	return t.flush()
}

func describeResidency(r policy.ResidencyDecision) string {
	if !r.Restricted() {
		return "none"
	}
	return r.Class + " (" + strings.Join(r.Countries, " ") + "), required by " + strings.Join(r.ImposedBy, ", ")
}

func describeOffer(o policy.Offer) string {
	return fmt.Sprintf("%s %s %s, %s×%d, %s, %s/h", o.Provider, o.Region, o.Country, o.Card, o.GPUCount, o.Tier, o.PricePerHour)
}
