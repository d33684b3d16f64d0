package cli

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/policy"
)

const planJob = `
name: train-vision
project: vision
labels: {data: personal}
command: [python, train.py]
resources:
  gpu: {count: 1, cards: [H100, A100-80GB], memory_gb: 80}
  cpu: 8
  memory_gb: 64
placement:
  tier: spot-then-on-demand
  residency: EEA
budget:
  max_price_per_hour: "2.50 EUR"
  total: "40 EUR"
expected_duration: 6h
inputs:
  - {name: frames, region: fsn1, bytes: 200000000000}
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPlanPrintsChoiceAlternativesAndRejections(t *testing.T) {
	t.Parallel()
	job := writeFile(t, "job.yaml", planJob)
	out, _, err := runCLI(t, "plan", "-f", job, "--offers", "../../../examples/offers.yaml", "--policy", "../../../examples/policy-eu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"chosen:     hz-fsn-a100 (hetzner fsn1 DE, A100-80GB×1, on-demand, 1.90 EUR/h)",
		"cost:       11.40 EUR = compute 11.40 EUR + spot overhead 0.00 EUR + egress 0.00 EUR over 6h0m0s",
		"required by rule personal-data, job",
		"2     aws-fra-h100-spot",
		"region us-east-1 (US) outside residency EU required by rule personal-data and job; price 3.90 USD/h (3.588 EUR) over cap 2.50 EUR/h",
		"provider cheapgpu denied by rule no-unvetted-clouds",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestPlanTakesTheSpecFileAsItsArgument(t *testing.T) {
	t.Parallel()
	job := writeFile(t, "job.yaml", planJob)
	offers := []string{"--offers", "../../../examples/offers.yaml", "--policy", "../../../examples/policy-eu.yaml"}
	out, _, err := runCLI(t, append([]string{"plan", job}, offers...)...)
	if err != nil || !strings.Contains(out, "chosen:     hz-fsn-a100") {
		t.Errorf("plan job.yaml: err %v, output:\n%s", err, out)
	}
	// "-" reads the spec from standard input, as gpuq submit -f - does.
	for _, args := range [][]string{{"plan", "-"}, {"plan", "-f", "-"}} {
		var stdout, stderr bytes.Buffer
		cmd := New()
		cmd.SetArgs(append(args, offers...))
		cmd.SetIn(strings.NewReader(planJob))
		cmd.SetOut(&stdout)
		cmd.SetErr(&stderr)
		if err := cmd.Execute(); err != nil || !strings.Contains(stdout.String(), "chosen:     hz-fsn-a100") {
			t.Errorf("gpuq %s with the spec on stdin: err %v, output:\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
	}
	_, _, err = runCLI(t, append([]string{"plan", "-f", job, job}, offers...)...)
	if err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("plan -f job.yaml job.yaml: want a refusal naming both, got %v", err)
	}
	// A job's id where its spec was meant points to the command that
	// explains that job's placement.
	id := "01a24883-315e-70c4-b75c-ec8c7f9bdf52"
	_, _, err = runCLI(t, append([]string{"plan", id}, offers...)...)
	if err == nil || !strings.Contains(err.Error(), "is a job id") || !strings.Contains(err.Error(), "gpuq status --explain "+id) {
		t.Errorf("plan <job id>: want a refusal pointing to gpuq status --explain, got %v", err)
	}
}

func TestPlanJSONIsTheDecision(t *testing.T) {
	t.Parallel()
	job := writeFile(t, "job.yaml", planJob)
	out, _, err := runCLI(t, "plan", "-f", job, "--offers", "../../../examples/offers.yaml", "--policy", "../../../examples/policy-eu.yaml", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var d policy.Decision
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if d.Chosen.Offer.Pool != "hz-fsn-a100" || len(d.Alternatives) != 1 || len(d.Rejected()) != 5 || d.Residency.Class != "EU" {
		t.Errorf("decision = %+v", d)
	}
	first := d.Rejected()[0]
	if d.Offers[first.Offer].Pool != "aws-use1-h100" || d.ReasonsOf(first)[0].Message != "region us-east-1 (US) outside residency EU required by rule personal-data and job" {
		t.Errorf("first rejection %s: %+v", d.Offers[first.Offer].Pool, d.ReasonsOf(first))
	}
}

func TestPlanUsesConfiguredPoolsAndPolicyWithoutFlags(t *testing.T) {
	t.Parallel()
	job := writeFile(t, "job.yaml", planJob)
	config := writeFile(t, "gpuq.yaml", `
pools:
  - {pool: dev-a100, region: home, country: DE, card: A100-80GB, gpu_count: 1, gpu_memory_gb: 80, vcpu: 16, memory_gb: 128, price_per_hour: "1.00"}
  - {pool: dev-ch, region: zrh, country: CH, card: H100, gpu_count: 1, gpu_memory_gb: 80, vcpu: 16, memory_gb: 128, price_per_hour: "0.50"}
policy:
  rules:
    - {name: personal-data, labels: {data: personal}, residency: EU}
`)
	out, _, err := runCLI(t, "plan", "-f", job, "--config", config)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "chosen:     dev-a100 (local home DE") || !strings.Contains(out, "region zrh (CH) outside residency EU") {
		t.Errorf("output:\n%s", out)
	}
}

func TestPlanRefusalExitsTwoWithCountedReasons(t *testing.T) {
	t.Parallel()
	job := writeFile(t, "job.yaml", strings.Replace(planJob, `"2.50 EUR"`, `"1.00 EUR"`, 1))
	out, _, err := runCLI(t, "plan", "-f", job, "--offers", "../../../examples/offers.yaml", "--policy", "../../../examples/policy-eu.yaml")
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != 2 {
		t.Fatalf("err = %v, want exit status 2", err)
	}
	if !strings.Contains(err.Error(), "no placement among 7 offers: 6 offers over the price cap 1.00 EUR/h") {
		t.Errorf("err = %v", err)
	}
	if !strings.Contains(out, "hz-fsn-a100        hetzner     fsn1          price 1.90 EUR/h over cap 1.00 EUR/h") {
		t.Errorf("rejections not printed:\n%s", out)
	}
}

func TestPlanRefusesBadInputNamingTheKey(t *testing.T) {
	t.Parallel()
	goodJob := writeFile(t, "job.yaml", planJob)
	tests := []struct {
		name   string
		job    string
		policy string
		want   string
	}{
		{"job gpu count", strings.Replace(planJob, "count: 1", "count: 0", 1), "", "spec.resources.gpu.count: must be 1–16, got 0"},
		{"job price", strings.Replace(planJob, `"2.50 EUR"`, `"2.50"`, 1), "", `spec.budget.max_price_per_hour: must be an amount and a currency`},
		{"job duration", strings.Replace(planJob, "6h", "six hours", 1), "", `spec.expected_duration: must be a duration such as "90s" or "2h", got "six hours"`},
		{"job unknown key", strings.Replace(planJob, "labels:", "lables:", 1), "", `spec.lables: unknown field`},
		{"job tier", strings.Replace(planJob, "spot-then-on-demand", "cheap", 1), "", `placement.tier: must be spot, on-demand or spot-then-on-demand`},
		{"undefined class", "", "rules:\n  - {name: x, residency: EUU}\n", `rules[0].residency: undefined residency class "EUU"`},
		{"budget currency", "", "budgets:\n  - {project: a, period: month, cap: \"5 GBP\"}\n", `budgets[0].cap: unknown currency "GBP"`},
		{"malformed glob", "", "rules:\n  - {name: x, project: \"a[\"}\n", `rules[0].project: malformed glob "a["`},
		{"unknown key", "", "rulez: []\n", `rulez`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"plan", "--offers", "../../../examples/offers.yaml"}
			if tt.job != "" {
				args = append(args, "-f", writeFile(t, "job.yaml", tt.job))
			} else {
				args = append(args, "-f", goodJob, "--policy", writeFile(t, "policy.yaml", tt.policy))
			}
			_, _, err := runCLI(t, args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestPlanExitStatusTellsNoOffersFromNoFeasibleOffer(t *testing.T) {
	t.Parallel()
	job := writeFile(t, "job.yaml", planJob)
	tests := []struct {
		name, offers string
		code         int
		want         string
	}{
		{"no offers at all", "offers: []\n", 3, "no offers: none from offers file "},
		{"offers, none feasible", "offers:\n  - {provider: aws, pool: use1, region: us-east-1, country: US, card: H100, gpu_count: 1, gpu_memory_gb: 80, vcpu: 8, memory_gb: 64, tier: on-demand, price_per_hour: \"1 EUR\"}\n",
			2, "no placement among 1 offer: 1 offer outside residency EU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := runCLI(t, "plan", "-f", job, "--offers", writeFile(t, "offers.yaml", tt.offers), "--policy", "../../../examples/policy-eu.yaml")
			var exit *ExitError
			if !errors.As(err, &exit) || exit.Code != tt.code || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want exit status %d and %q", err, tt.code, tt.want)
			}
		})
	}
}

// Each case is what a user writes (job spec, offers, policy) and what plan
// says back.
func TestPlanAnswersWhatUsersWrite(t *testing.T) {
	t.Parallel()
	const offers = `offers:
  - {provider: hetzner, pool: fsn-a100-40, region: fsn1, country: de, card: A100-40GB, gpu_count: 1, gpu_memory_gb: 40, vcpu: 16, memory_gb: 128, tier: on-demand, price_per_hour: "1.00 EUR", egress_per_gb: "0 EUR"}
  - {provider: hetzner, pool: fsn-a100-80, region: fsn1, country: DE, card: NVIDIA A100-SXM4-80GB, gpu_count: 1, gpu_memory_gb: 80, vcpu: 16, memory_gb: 128, tier: on-demand, price_per_hour: "1.50 EUR", egress_per_gb: "0 EUR"}
  - {provider: hetzner, pool: fsn-t4, region: fsn1, country: DE, card: T4, gpu_count: 1, gpu_memory_gb: 16, vcpu: 16, memory_gb: 64, tier: on-demand, price_per_hour: "0.20 EUR", egress_per_gb: "0 EUR"}
  - {provider: hetzner, pool: fsn-cpu, region: fsn1, country: DE, card: cpu, gpu_count: 0, vcpu: 16, memory_gb: 64, tier: on-demand, price_per_hour: "0.25 EUR", egress_per_gb: "0 EUR"}
  - {provider: aws, pool: use1-h100, region: us-east-1, country: US, card: H100, gpu_count: 1, gpu_memory_gb: 80, vcpu: 16, memory_gb: 128, tier: on-demand, price_per_hour: "3.00 EUR", egress_per_gb: "0.09 EUR"}
`
	const rules = "rules:\n  - {name: eea-only, project: eu-*, residency: EEA}\n"
	tests := []struct {
		name, job string
		offers    string
		policy    string
		want      []string // in the output, or in the error when it starts with "error: "
	}{
		{"a family matches every size", "resources: {gpu: {count: 1, cards: [a100]}}", offers, "",
			[]string{"chosen:     fsn-a100-40", "2     fsn-a100-80"}},
		{"a size narrows it", "resources: {gpu: {count: 1, cards: [A100-80GB]}}", offers, "",
			[]string{"chosen:     fsn-a100-80", "card A100-40GB not accepted (A100-80GB)"}},
		{"an unknown card is refused naming the field", "resources: {gpu: {count: 1, cards: [H100, X100]}}", offers, "",
			[]string{`error: job spec `, `: invalid job spec: spec.resources.gpu.cards[1]: unknown card "X100"; known families: A10, A100,`}},
		{"CPU work stays off a cheaper GPU pool", "resources: {cpu: 8}", offers, "",
			[]string{"chosen:     fsn-cpu", "GPU pool kept for GPU jobs"}},
		{"allowed, a GPU pool is plan B", "resources: {cpu: 8}\nplacement: {allow_gpu_for_cpu: true}", offers, "",
			[]string{"chosen:     fsn-cpu", "2     fsn-t4"}},
		{"egress is billed where the input is stored", "resources: {gpu: {count: 1, cards: [A100, H100]}}\ninputs: [{name: frames, provider: aws, region: us-east-1, bytes: 1000000000000}]", offers, "",
			[]string{"chosen:     use1-h100", "1.00 EUR  91.00 EUR"}},
		{"a bad residency names placement.residency and the file", "placement: {residency: EUU}", offers, "",
			[]string{"error: job spec ", `: spec.placement.residency: undefined residency class "EUU"; known classes: EU, EEA, CH, UK`}},
		{"disjoint classes share no country", "project: eu-ml\nplacement: {residency: CH}", offers, rules,
			[]string{"error: no placement among 5 offers: 5 offers outside residency EEA∩CH (EEA and CH share no country)"}},
		{"duplicate pool ids name both entries", "", offers + "  - {provider: aws, pool: fsn-cpu, region: us-east-1, country: US, card: cpu, vcpu: 16, memory_gb: 64, tier: on-demand, price_per_hour: \"0.10 EUR\"}\n", "",
			[]string{`error: offers file `, `offers[3].pool and offers[5].pool: both are "fsn-cpu" (hetzner fsn1 DE and aws us-east-1 US)`}},
		{"a country that is not a code is refused naming the field", "", strings.Replace(offers, "country: US", "country: USA", 1), "",
			[]string{`offers[4].country: want an ISO 3166-1 alpha-2 code such as DE, got "USA"`}},
		{"a YAML error names its line", "", offers, "base_currency: EUR\nrules:\n  - {name: a, residency: EU\n",
			[]string{"error: policy file ", "yaml: line 3: did not find expected ',' or '}'"}},
		{"unknown policy keys name their path", "", offers, "exchange_rate: {USD: 0.9}\nrules:\n  - {name: a, residencey: EU}\n",
			[]string{"error: policy file ", "exchange_rate: unknown key; allowed: base_currency, exchange_rates,", "rules[0].residencey: unknown key; allowed: name, project, labels, residency,",
				"(did you mean exchange_rates?)", "(did you mean residency?)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := "command: [run]\n" + cmp.Or(tt.job, "resources: {cpu: 8}")
			args := []string{"plan", "-f", writeFile(t, "job.yaml", job), "--offers", writeFile(t, "offers.yaml", tt.offers)}
			if tt.policy != "" {
				args = append(args, "--policy", writeFile(t, "policy.yaml", tt.policy))
			}
			out, _, err := runCLI(t, args...)
			got := out
			if err != nil {
				got = "error: " + err.Error()
			}
			for _, want := range tt.want {
				if !strings.Contains(got, want) {
					t.Errorf("plan said:\n%s\nwant it to contain %q", got, want)
				}
			}
		})
	}
}

// With no --offers and no pools configured, plan reads the offers of the
// pools `gpuq dev` runs by default, as the scheduler next to it does.
func TestPlanWithoutPoolsUsesTheSchedulersDefaultPools(t *testing.T) {
	t.Parallel()
	job := writeFile(t, "job.yaml", "project: vision\ncommand: [/bin/true]\nplacement: {tier: on-demand}\n")
	config := writeFile(t, "gpuq.yaml", "output: table\n")
	out, _, err := runCLI(t, "plan", "-f", job, "--config", config)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// A CPU pool's machine is its vCPUs (a GPU pool's, its cards: the
	// A100-80GB×1 above).
	if !strings.Contains(out, "chosen:     local-cpu (local eu-local-1 DE, 64 vCPU, on-demand, 0.10 EUR/h)") {
		t.Errorf("output:\n%s", out)
	}
}
