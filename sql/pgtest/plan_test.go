package pgtest

import (
	"reflect"
	"testing"
)

func TestPlanNodesListsEveryNodeParentFirst(t *testing.T) {
	plan := `[{"Plan": {"Node Type": "Nested Loop", "Plans": [
		{"Node Type": "Seq Scan", "Relation Name": "attempts"},
		{"Node Type": "Index Scan", "Relation Name": "jobs", "Index Name": "jobs_pkey", "Index Cond": "(id = l.id)",
		 "Plans": [{"Node Type": "Result"}]}]}}]`
	got := PlanNodes(t, plan)
	want := []PlanNode{{Type: "Nested Loop"}, {Type: "Seq Scan", Relation: "attempts"},
		{Type: "Index Scan", Relation: "jobs", Index: "jobs_pkey", Cond: "(id = l.id)"}, {Type: "Result"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("PlanNodes:\n got %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{`{}`, `[]`, `[{"Plan": {}}, {"Plan": {}}]`, `[{"Plan": {"Plans": [1]}}]`} {
		if _, err := planNodes(bad); err == nil {
			t.Errorf("planNodes(%s): no error", bad)
		}
	}
}
