package control_test

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue/control"
)

// A policy written as a document reads back as the same rules: the budgets
// endpoint stores rules it edited this way.
func TestRulesDocumentReadsBackAsTheSameRules(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../examples/policy-eu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := control.ParseRules(data, "yaml")
	if err != nil {
		t.Fatal(err)
	}
	rules.Spot.RestartOverhead = 90e9 // a duration the example leaves unset
	rules.Budgets = append(rules.Budgets, policy.Budget{Project: "x", Cap: policy.Money{Micros: 2_500_000, Currency: "EUR"}, Period: "day"})
	doc, err := control.RulesDocument(rules)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), `"restart_overhead":"1m30s"`) || !strings.Contains(string(doc), `"cap":"2.50 EUR"`) {
		t.Fatalf("durations and money must be written as a policy file writes them: %s", doc)
	}
	back, err := control.ParseRules(doc, "json")
	if err != nil {
		t.Fatalf("the document must read back: %v\n%s", err, doc)
	}
	if !reflect.DeepEqual(back, rules) {
		t.Fatalf("read back:\n%+v\nwant:\n%+v", back, rules)
	}
	empty, err := control.RulesDocument(policy.Rules{})
	if err != nil || string(empty) != "{}" {
		t.Fatalf("no rules: %s %v", empty, err)
	}
}
