package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/control/httpapi"
)

// Exit statuses of gpuq plan besides 0 and 1 (any other error).
const (
	// exitPlanInfeasible: there are offers, and none is feasible.
	exitPlanInfeasible = 2
	// exitPlanNoOffers: there are no offers at all.
	exitPlanNoOffers = 3
)

// maxPlanFileBytes bounds the policy and offers files plan reads.
const maxPlanFileBytes = 64 << 20

func newPlanCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan [-f] job.yaml [--offers offers.yaml] [--policy policy.yaml]",
		Short: "Show where a job would run and why: chosen offer, plan B, rejections, cost",
		Long: `plan places a job without submitting it. It prints the chosen offer, the ranked
alternatives, every rejected offer with every reason, and the cost breakdown.
Offers come from --offers, or else from the configured local pools (config key
"pools"). Rules come from --policy, or else from the config key "policy".
With an HTTP API configured (--url, GPUQ_URL or url: in the config file, as
gpuq dev writes it), neither --offers nor --policy given and no pools,
providers or policy in the config file, the server plans it with its own
offers, policy and budgets, as it would place the job.
When no offer is feasible, plan prints the rejections and exits with status 2;
when there are no offers at all, it exits with status 3.`,
		Args: cobra.MaximumNArgs(1),
		RunE: runPlan,
	}
	cmd.Flags().StringP("file", "f", "", "job spec file (YAML or JSON; - for standard input)")
	cmd.Flags().String("offers", "", "offers file (YAML or JSON, key \"offers\"); default: the configured pools")
	cmd.Flags().String("policy", "", "placement rules file (YAML or JSON); default: the config key \"policy\"")
	cmd.Flags().String("url", "", "gpuq HTTP API URL (env GPUQ_URL; token from GPUQ_TOKEN or the config file's token key): ask that server, with its offers, policy and budgets, unless --offers or --policy is given")
	return cmd
}

func runPlan(cmd *cobra.Command, args []string) error {
	v, format, err := loadConfigFormat(cmd)
	if err != nil {
		return err
	}
	file := v.GetString("file")
	switch {
	case len(args) == 1 && file != "":
		return fmt.Errorf("the job spec file given twice: --file %s and %s; give one", file, args[0])
	case len(args) == 1:
		file = args[0]
	case file == "":
		return errors.New("--file: the job spec file is required")
	}
	spec, job, err := planJobFromFile(file, cmd.InOrStdin())
	if err != nil {
		return err
	}
	if !cmd.Flags().Changed("offers") && !cmd.Flags().Changed("policy") && askServer(v, "pools", "providers", "policy") {
		return planViaAPI(cmd, v, spec, format)
	}
	rules, err := loadRules(v)
	if err != nil {
		return err
	}
	offers, source, err := loadOffers(cmd, v)
	if err != nil {
		return err
	}
	if len(offers.List) == 0 {
		return &ExitError{Code: exitPlanNoOffers, Err: fmt.Errorf("no offers: none from %s, so there is nothing to place the job on", source)}
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
		return &ExitError{Code: exitPlanInfeasible, Err: err}
	}
	if err != nil {
		// The rules were checked when they loaded: what is left is the
		// job's against them, such as an undefined residency class.
		return fmt.Errorf("job spec %s: %w", v.GetString("file"), err)
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
		c.DecodeHook = control.DecodeHook()
		c.ErrorUnused = true
	}
}

// loadRules reads the placement rules and refuses invalid ones, naming the
// key.
func loadRules(v *viper.Viper) (policy.Rules, error) {
	var rules policy.Rules
	if path := v.GetString("policy"); path != "" {
		data, err := readPlanFile("policy", path)
		if err != nil {
			return rules, err
		}
		rules, err := parseRules(data, path)
		if err != nil {
			return rules, fmt.Errorf("policy file %s: %w", path, err)
		}
		return rules, nil
	}
	if v.IsSet("policy") {
		if _, isFlag := v.Get("policy").(string); !isFlag {
			if err := v.UnmarshalKey("policy", &rules, configDecodeHook()); err != nil {
				return rules, fmt.Errorf("config key policy: %w", control.UnknownKeys(err, reflect.TypeOf(rules)))
			}
		}
	}
	if err := rules.Validate(); err != nil {
		return rules, fmt.Errorf("config key policy.%w", err)
	}
	return rules, nil
}

// loadOffers reads --offers, or else asks the same offer sources the
// scheduler places among, and says where the offers came from. Offers are
// checked as one set: a malformed entry or two entries under one pool id
// are refused naming them.
func loadOffers(cmd *cobra.Command, v *viper.Viper) (*control.Offers, string, error) {
	if path := v.GetString("offers"); path != "" {
		source := "offers file " + path
		data, err := readPlanFile("offers", path)
		if err != nil {
			return nil, source, err
		}
		offers, err := parseOffers(data, path)
		if err != nil {
			return nil, source, fmt.Errorf("%s: %w", source, err)
		}
		return control.NewOffers(offers), source, nil
	}
	source := "the configured pools (config key pools)"
	sources, err := offerSources(v)
	if err != nil {
		return nil, source, err
	}
	offers, err := control.CollectOffers(cmd.Context(), sources)
	return offers, source, err
}

// readPlanFile reads a policy or offers file, bounded.
func readPlanFile(kind, path string) ([]byte, error) {
	data, err := readLimited(path, maxPlanFileBytes+1)
	if err != nil {
		return nil, fmt.Errorf("reading %s file: %w", kind, err)
	}
	if len(data) > maxPlanFileBytes {
		return nil, fmt.Errorf("%s file %s: over the %d-byte limit", kind, path, maxPlanFileBytes)
	}
	return data, nil
}

// planFileConfig reads a policy or offers file's contents (path says its
// format) as control.ReadDocument does.
func planFileConfig(data []byte, path string) (*viper.Viper, error) {
	return control.ReadDocument(data, configType(path))
}

// configType is the format viper reads a file in, from its extension;
// YAML (of which JSON is a part) when the extension says nothing.
func configType(path string) string {
	ext := strings.TrimPrefix(filepath.Ext(path), ".")
	if slices.Contains(viper.SupportedExts, ext) {
		return ext
	}
	return "yaml"
}

// parseRules reads placement rules from a policy file's contents (path
// says its format) and validates them, as the HTTP API reads a policy.
func parseRules(data []byte, path string) (policy.Rules, error) {
	return control.ParseRules(data, configType(path))
}

// parseOffers reads the offers of an offers file's contents (key "offers";
// path says its format) and checks them as one set.
func parseOffers(data []byte, path string) ([]policy.Offer, error) {
	f, err := planFileConfig(data, path)
	if err != nil {
		return nil, err
	}
	var file struct {
		Offers []policy.Offer `mapstructure:"offers"`
	}
	if err := f.Unmarshal(&file, configDecodeHook()); err != nil {
		return nil, control.UnknownKeys(err, reflect.TypeOf(file))
	}
	if err := policy.NormalizeOffers(file.Offers); err != nil {
		return nil, err
	}
	return file.Offers, nil
}

// planJobFromFile reads a job spec (path "-": from stdin) with the same
// strict parser as gpuq submit and converts it into placement
// requirements.
func planJobFromFile(path string, stdin io.Reader) (*queue.Spec, policy.Requirements, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(io.LimitReader(stdin, queue.MaxSpecBytes+1))
	} else {
		data, err = readLimited(path, queue.MaxSpecBytes+1)
	}
	if err != nil {
		if _, idErr := uuid.Parse(path); idErr == nil && errors.Is(err, fs.ErrNotExist) {
			return nil, policy.Requirements{}, fmt.Errorf("%s is a job id, not a job spec file: gpuq status --explain %s shows where that job was placed and why", path, path)
		}
		return nil, policy.Requirements{}, fmt.Errorf("reading job spec: %w", err)
	}
	if doc, err := queue.SpecDocument(data); err == nil {
		if _, local := localWorkdir(doc); local {
			// Where a job runs does not depend on its working directory,
			// which a plan does not upload.
			delete(doc, "workdir")
			if data, err = json.Marshal(doc); err != nil {
				return nil, policy.Requirements{}, err
			}
		}
	}
	spec, err := queue.ParseSpec(data)
	if err != nil {
		return nil, policy.Requirements{}, fmt.Errorf("job spec %s: %w", path, err)
	}
	job, err := control.PolicyJob(spec)
	if err != nil {
		return spec, job, fmt.Errorf("job spec %s: %w", path, err)
	}
	if err := job.Validate(); err != nil {
		return spec, job, fmt.Errorf("job spec %s: %w", path, queue.SpecKeys(err))
	}
	return spec, job, nil
}

// planViaAPI asks the HTTP API where spec would run: the server's offers,
// policy and budgets decide, as they would for a submission. It prints
// what a plan made here prints, -o json included.
func planViaAPI(cmd *cobra.Command, v *viper.Viper, spec *queue.Spec, format string) error {
	a, err := newAPIJobs(v)
	if err != nil {
		return err
	}
	defer a.Close()
	raw, err := a.raw(cmd.Context(), http.MethodPost, "/v1/plan", nil, spec)
	if err != nil {
		return err
	}
	var plan httpapi.Plan
	var d policy.Decision
	if err := json.Unmarshal(raw, &plan); err == nil {
		err = json.Unmarshal(plan.Decision, &d)
	}
	if err != nil {
		return fmt.Errorf("POST /v1/plan: reading the answer: %w", err)
	}
	out := cmd.OutOrStdout()
	if plan.Feasible {
		if format == "json" {
			return writeJSON(out, d)
		}
		return printDecision(out, d)
	}
	refusal := &policy.NoPlacementError{Offers: len(d.Offers), Counts: plan.Counts, Relaxation: plan.Relaxation, Decision: d}
	if format == "json" {
		err = writeJSON(out, refusal)
	} else {
		err = printRejected(out, d)
	}
	switch {
	case err != nil:
		return err
	case refusal.Offers == 0:
		return &ExitError{Code: exitPlanNoOffers, Err: errors.New(plan.Reason)}
	}
	return &ExitError{Code: exitPlanInfeasible, Err: errors.New(plan.Reason)}
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
	fmt.Fprintf(w, "feasible:   %d of %d offers\n\n", d.Feasible, d.Feasible+d.RejectedCount())
	t := newTable(w, "RANK", "POOL", "PROVIDER", "REGION", "COUNTRY", "MACHINE", "TIER", "PRICE/H", "TOTAL", "AVAILABILITY")
	for _, a := range append([]policy.Candidate{*c}, d.Alternatives...) {
		o := a.Offer
		t.row(a.Rank, o.Pool, o.Provider, o.Region, o.Country, machineOf(o), o.Tier,
			o.PricePerHour, a.Cost.Total, o.Availability)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if d.RejectedCount() == 0 {
		return nil
	}
	fmt.Fprintln(w)
	return printRejected(w, d)
}

func printRejected(w io.Writer, d policy.Decision) error {
	t := newTable(w, "REJECTED", "PROVIDER", "REGION", "REASONS")
	reasons := d.Reasons()
	for _, r := range d.Rejected() {
		msgs := make([]string, len(r.Reasons))
		for i, k := range r.Reasons {
			msgs[i] = reasons[k].Message
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
	return fmt.Sprintf("%s %s %s, %s, %s, %s/h", o.Provider, o.Region, o.Country, machineOf(o), o.Tier, o.PricePerHour)
}

// machineOf names an offer's machine: its GPUs (H100×8), or for a CPU
// pool its vCPUs.
func machineOf(o policy.Offer) string {
	switch {
	case o.GPUCount > 0:
		return fmt.Sprintf("%s×%d", o.Card, o.GPUCount)
	case o.VCPU > 0:
		return fmt.Sprintf("%d vCPU", o.VCPU)
	}
	return o.Card
}
