package control

import (
	"encoding/json"
	"testing"
)

func TestALedgerWithNoJobsListsThemAsAnEmptyList(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(Ledger{Project: "p", Amounts: []LedgerAmount{}, Places: []LedgerLine{}, Jobs: ledgerJobs(nil)})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if jobs, ok := doc["jobs"].([]any); !ok || len(jobs) != 0 {
		t.Fatalf("jobs: want [], got %s", b)
	}
}
