package cli

import (
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
	if d.Chosen.Offer.Pool != "hz-fsn-a100" || len(d.Alternatives) != 1 || len(d.Rejected) != 5 || d.Residency.Class != "EU" {
		t.Errorf("decision = %+v", d)
	}
	first := d.Rejected[0]
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
	if !strings.Contains(out, "chosen:     local-cpu (local eu-local-1 DE") {
		t.Errorf("output:\n%s", out)
	}
}
