package cli

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/workers"
)

// `gpuq spend --project P` shows the project's ledger: accrued and reserved
// per currency, each job's estimate against what it accrued, summed per
// provider and region; -o json is the HTTP API's spend document.
func TestSpendProjectShowsTheLedgerAndItsJSONIsTheAPIDocument(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := queuetest.StartNATS(t)
	s, url := queuetest.Store(t, n)
	conn := []string{"--nats-url", n.URL, "--database-url", url}
	since := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)

	// Three jobs of vision at 3600 EUR/h, each estimated at 100 EUR: one
	// placed, one running for 10 s, one that ran 20 s and succeeded; and
	// one of another project, which the ledger leaves out.
	placedID, runningID, doneID, otherID := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	var jobs []queue.NewJob
	var placed []queue.PlacedJob
	for _, j := range []struct {
		id              uuid.UUID
		project, region string
	}{{placedID, "vision", "eu-central-1"}, {runningID, "vision", "eu-central-1"}, {doneID, "vision", "eu-west-1"}, {otherID, "audio", "eu-west-1"}} {
		spec, err := queue.ParseSpec([]byte("project: " + j.project + "\ncommand: [/bin/true]\n"))
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, queue.NewJob{ID: j.id, Spec: spec})
		placed = append(placed, queue.PlacedJob{JobID: j.id, Placement: queue.Placement{Version: 1, Pool: "p", Region: j.region, Provider: "local",
			PriceMicros: 3_600_000_000, Currency: "EUR", EstimateMicros: 100_000_000, EstimateCurrency: "EUR"}})
	}
	if _, _, err := s.RecordAndPlace(ctx, jobs, queue.Decided{Placed: placed}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uuid.UUID{runningID, doneID} {
		if _, err := s.Claim(ctx, queue.ClaimRequest{JobID: id, PlacementVersion: 1, Lease: time.Minute, WorkerID: "w", Host: "h", PID: 1, Pool: "p"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Succeed(ctx, doneID, 1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB.Exec(`UPDATE attempts SET started_at = heartbeat_at - interval '10 seconds' WHERE job_id = $1`, runningID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB.Exec(`UPDATE attempts SET started_at = ended_at - interval '20 seconds' WHERE job_id = $1`, doneID); err != nil {
		t.Fatal(err)
	}

	// The budgets that apply to vision: its own, and one over a glob
	// matching it; audio's does not apply.
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(`budgets:
  - {project: vision, period: month, cap: "1000 EUR"}
  - {project: "vis*", period: total, cap: "500 EUR"}
  - {project: audio, period: day, cap: "1 EUR"}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := runCLI(t, "policy", "set", policyFile, "--database-url", url); err != nil {
		t.Fatalf("policy set: %v\n%s", err, errOut)
	}

	out, errOut, err := runCLI(t, append([]string{"spend", "--project", "vision", "--since", since.Format(time.RFC3339), "-o", "json"}, conn...)...)
	if err != nil {
		t.Fatalf("spend --project: %v\n%s", err, errOut)
	}
	var l control.Ledger
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatal(err)
	}
	// Accrued: 10 + 20 EUR. Reserved: 100 (placed) + 90 (running); the
	// finished job released its unused 80.
	if len(l.Amounts) != 1 || l.Amounts[0] != (control.LedgerAmount{Currency: "EUR", Micros: 30_000_000, ReservedMicros: 190_000_000}) {
		t.Fatalf("amounts: %+v", l.Amounts)
	}
	wantJobs := map[uuid.UUID]control.LedgerJob{
		placedID:  {State: queue.StatePlaced, Region: "eu-central-1", EstimatedMicros: 100_000_000, ReservedMicros: 100_000_000},
		runningID: {State: queue.StateRunning, Region: "eu-central-1", EstimatedMicros: 100_000_000, AccruedMicros: 10_000_000, ReservedMicros: 90_000_000},
		doneID:    {State: queue.StateSucceeded, Region: "eu-west-1", EstimatedMicros: 100_000_000, AccruedMicros: 20_000_000},
	}
	if len(l.Jobs) != len(wantJobs) {
		t.Fatalf("jobs: %+v", l.Jobs)
	}
	for _, j := range l.Jobs {
		w, ok := wantJobs[j.JobID]
		if !ok || j.State != w.State || j.Region != w.Region || j.Provider != "local" || j.Currency != "EUR" ||
			j.EstimatedMicros != w.EstimatedMicros || j.AccruedMicros != w.AccruedMicros || j.ReservedMicros != w.ReservedMicros {
			t.Fatalf("job line %+v, want %+v", j, w)
		}
	}
	wantPlaces := []control.LedgerLine{
		{Provider: "local", Region: "eu-central-1", Currency: "EUR", Jobs: 2, EstimatedMicros: 200_000_000, AccruedMicros: 10_000_000, ReservedMicros: 190_000_000},
		{Provider: "local", Region: "eu-west-1", Currency: "EUR", Jobs: 1, EstimatedMicros: 100_000_000, AccruedMicros: 20_000_000},
	}
	if len(l.Places) != 2 || l.Places[0] != wantPlaces[0] || l.Places[1] != wantPlaces[1] {
		t.Fatalf("places: %+v", l.Places)
	}
	// Each budget counts the 30 EUR accrued in its period (all of it for
	// total; the month's start is checked by its date) and the 190 EUR
	// reserved: 500 - 30 - 190 left of the total.
	if len(l.Budgets) != 2 {
		t.Fatalf("budgets: %+v", l.Budgets)
	}
	month, total := l.Budgets[0], l.Budgets[1]
	if month.Budget != "vision" || month.Period != "month" || month.Cap != "1000.00 EUR" || month.Reserved != "190.00 EUR" ||
		!month.PeriodStart.Equal(policy.PeriodStart("month", time.Now())) {
		t.Fatalf("vision's monthly budget: %+v", month)
	}
	if want := (control.BudgetUsage{Budget: "vis*", Cap: "500.00 EUR", Period: "total", Spent: "30.00 EUR", Reserved: "190.00 EUR", Remaining: "280.00 EUR"}); total != want {
		t.Fatalf("the total budget over vis*: %+v, want %+v", total, want)
	}

	// The same document from the HTTP API.
	srv, err := httpapi.New(httpapi.Config{Store: s, JS: n.JS, NATS: n.NC, Archives: &workers.ObjectStore{JS: n.JS}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srvCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go srv.Serve(srvCtx, ln) //nolint:errcheck // ends with the test
	secret, tok, err := queue.NewTokenSecret("test", []string{"vision"}, queue.RoleRead, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ln.Addr().String()+"/v1/projects/vision/spend?since="+since.Format(time.RFC3339), nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET spend: %s %s", resp.Status, body)
	}
	var fromAPI, fromCLI map[string]any
	if err := json.Unmarshal(body, &fromAPI); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &fromCLI); err != nil {
		t.Fatal(err)
	}
	delete(fromAPI, "$schema") // huma's link to the schema; the CLI has none
	a, _ := json.Marshal(fromAPI)
	c, _ := json.Marshal(fromCLI)
	if string(a) != string(c) {
		t.Fatalf("spend -o json differs from the API document:\nCLI %s\nAPI %s", c, a)
	}

	out, _, err = runCLI(t, append([]string{"spend", "--project", "vision", "--since", "2h"}, conn...)...)
	if err != nil || !strings.Contains(out, "eu-central-1") || !strings.Contains(out, "190.00 EUR") {
		t.Fatalf("spend --project table: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^BUDGET +PERIOD +SINCE +CAP +SPENT +RESERVED +REMAINING\n` +
		`vision +month +\d{4}-\d\d-01 +1000\.00 EUR +[\d.]+ EUR +190\.00 EUR +[\d.]+ EUR\n` +
		`vis\* +total +- +500\.00 EUR +30\.00 EUR +190\.00 EUR +280\.00 EUR\n`).MatchString(out) {
		t.Fatalf("spend --project must begin with what is left of each budget:\n%s", out)
	}
	if _, _, err := runCLI(t, append([]string{"spend", "--since", "yesterday"}, conn...)...); err == nil || !strings.Contains(err.Error(), "--since") {
		t.Fatalf("a bad --since must name the flag: %v", err)
	}
}
