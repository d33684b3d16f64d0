package pgtest

import (
	"encoding/json"
	"fmt"
	"testing"
)

// PlanNode is one node of a plan printed by EXPLAIN (FORMAT JSON).
type PlanNode struct {
	Type     string `json:"Node Type"`
	Relation string `json:"Relation Name"`
	Index    string `json:"Index Name"`
	Cond     string `json:"Index Cond"`
}

// PlanNodes returns every node of a plan printed by EXPLAIN (FORMAT JSON),
// each before the nodes under it; a plan it cannot read fails t.
func PlanNodes(t testing.TB, plan string) []PlanNode {
	t.Helper()
	nodes, err := planNodes(plan)
	if err != nil {
		t.Fatalf("%v\n%s", err, plan)
	}
	return nodes
}

func planNodes(plan string) ([]PlanNode, error) {
	var doc []struct {
		Plan json.RawMessage `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc) != 1 {
		return nil, fmt.Errorf("reading a plan of %d statements: %v", len(doc), err)
	}
	var nodes []PlanNode
	var walk func(raw json.RawMessage) error
	walk = func(raw json.RawMessage) error {
		var node struct {
			PlanNode
			Plans []json.RawMessage `json:"Plans"`
		}
		if err := json.Unmarshal(raw, &node); err != nil {
			return fmt.Errorf("reading a plan node: %w", err)
		}
		nodes = append(nodes, node.PlanNode)
		for _, p := range node.Plans {
			if err := walk(p); err != nil {
				return err
			}
		}
		return nil
	}
	return nodes, walk(doc[0].Plan)
}
