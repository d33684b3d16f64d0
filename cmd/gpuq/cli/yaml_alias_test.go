package cli

import (
	"fmt"
	"strings"
	"testing"
)

// laughs is a "billion laughs" mapping under key: nine levels of ten
// aliases each, 10^9 strings once expanded.
func laughs(key string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:\n  a0: &a0 \"lol\"\n", key)
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	return b.String()
}

func TestPlanRefusesYAMLAliasesInEveryFileBeforeExpandingThem(t *testing.T) {
	t.Parallel()
	job := writeFile(t, "job.yaml", planJob)
	offers := "../../../examples/offers.yaml"
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"job spec", []string{"-f", writeFile(t, "job.yaml", planJob+laughs("env")), "--offers", offers},
			"spec.env.a0: line 20: YAML anchor &a0: aliases and anchors are not accepted"},
		{"policy file", []string{"-f", job, "--offers", offers, "--policy", writeFile(t, "policy.yaml", "rules: []\n"+laughs("x"))},
			"x.a0 (line 3): YAML anchor &a0: aliases and anchors are not accepted"},
		{"offers file", []string{"-f", job, "--offers", writeFile(t, "offers.yaml", laughs("offers"))},
			"offers.a0 (line 2): YAML anchor &a0"},
		{"config file", []string{"-f", job, "--offers", offers, "--config", writeFile(t, "config.yaml", laughs("pools"))},
			"pools.a0 (line 2): YAML anchor &a0"},
		{"config file in JSON", []string{"-f", job, "--offers", offers, "--config", writeFile(t, "config.json", "{\"policy\": &p {}}")},
			"policy (line 1): YAML anchor &p"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := runCLI(t, append([]string{"plan"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
