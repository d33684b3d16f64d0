package httpapi_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/klauspost/compress/zstd"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/control/httpapi"
)

func TestServedOpenAPIDocumentIsTheCheckedInOne(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	r := e.do("GET", "/v1/openapi.json", "", "", nil)
	if r.Status != 200 {
		t.Fatalf("GET /v1/openapi.json without a token: %d %s", r.Status, r.Body)
	}
	var served, generated, checkedIn any
	r.json(t, &served)
	doc, err := httpapi.OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(doc, &generated)                                      //nolint:errcheck // compared below
	json.Unmarshal(mustRead(t, "../../../api/openapi.json"), &checkedIn) //nolint:errcheck // compared below
	if !reflect.DeepEqual(served, checkedIn) || !reflect.DeepEqual(generated, checkedIn) {
		t.Fatal("api/openapi.json is not what /v1/openapi.json serves; run `make generate`")
	}
	if v := served.(map[string]any)["openapi"]; v != "3.1.0" {
		t.Fatalf("openapi version %v, want 3.1.0", v)
	}
}

func TestUnknownPathsAndMethodsAnswerProblemDetails(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	admin := e.token(queue.RoleAdmin, nil, "*")
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/v1/nope", http.StatusNotFound, ""},
		{"GET", "/", http.StatusNotFound, ""},
		{"DELETE", "/v1/jobs", http.StatusMethodNotAllowed, "GET, HEAD, POST"},
		{"PUT", "/v1/openapi.json", http.StatusMethodNotAllowed, "GET, HEAD"},
	} {
		r := e.do(c.method, c.path, admin, "", nil)
		if r.Status != c.status || r.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%s %s: %d %q %s, want %d as application/problem+json", c.method, c.path, r.Status, r.Header.Get("Content-Type"), r.Body, c.status)
		}
		if got := r.Header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
		var p struct {
			Status int    `json:"status"`
			Detail string `json:"detail"`
		}
		r.json(t, &p)
		if p.Status != c.status || p.Detail == "" {
			t.Errorf("%s %s: problem %s, want status %d and a detail", c.method, c.path, r.Body, c.status)
		}
	}
	// Operations still answer as before.
	if r := e.do("GET", "/v1/healthz", "", "", nil); r.Status != http.StatusOK {
		t.Fatalf("GET /v1/healthz: %d %s", r.Status, r.Body)
	}
}

func TestEveryEndpointAnswersAsTheDocumentSays(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	doc := loadOpenAPI(t)
	admin := e.token(queue.RoleAdmin, nil, "ml")
	call := func(method, template, path, contentType string, body []byte, want int, header ...string) *response {
		t.Helper()
		r := e.do(method, path, admin, contentType, body, header...)
		if r.Status != want {
			t.Fatalf("%s %s: %d, want %d: %s", method, path, r.Status, want, r.Body)
		}
		doc.check(t, method, template, r)
		return r
	}

	// Submit as YAML and as JSON; a repeat with the same key is 200 with
	// the same job, the same key with another spec 409.
	spec := "name: hello\nproject: ml\nlabels: {team: vision}\nidempotency_key: cell-1\n" +
		"command: [/bin/sh, -c, 'echo hello; echo result > $GPUQ_OUTPUT_DIR/out.txt']\n"
	r := call("POST", "/v1/jobs", "/v1/jobs", "application/yaml", []byte(spec), http.StatusCreated)
	var job queue.Job
	r.json(t, &job)
	if r.Header.Get("Location") != "/v1/jobs/"+job.ID.String() || job.Project != "ml" {
		t.Fatalf("submit answered %+v, Location %q", job, r.Header.Get("Location"))
	}
	var again queue.Job
	call("POST", "/v1/jobs", "/v1/jobs", "application/yaml", []byte(spec), http.StatusOK).json(t, &again)
	if again.ID != job.ID {
		t.Fatalf("idempotent repeat named job %s, want %s", again.ID, job.ID)
	}
	r = call("POST", "/v1/jobs", "/v1/jobs", "application/yaml", []byte(strings.Replace(spec, "hello", "other", 1)), http.StatusConflict)
	if !strings.Contains(string(r.Body), "spec.idempotency_key") {
		t.Fatalf("409 must name the field: %s", r.Body)
	}
	r = call("POST", "/v1/jobs", "/v1/jobs", "application/json", []byte(`{"command":["true"],"resources":{"gpu":{"count":0}}}`), http.StatusUnprocessableEntity)
	var problem struct {
		Errors []struct{ Location, Message string }
	}
	r.json(t, &problem)
	if r.Header.Get("Content-Type") != "application/problem+json" || len(problem.Errors) != 1 || problem.Errors[0].Location != "spec.resources.gpu.count" {
		t.Fatalf("a bad spec must be a problem naming spec.resources.gpu.count: %s %s", r.Header.Get("Content-Type"), r.Body)
	}
	call("POST", "/v1/jobs", "/v1/jobs", "application/yaml", bytes.Repeat([]byte("#"), queue.MaxSpecBytes+10), http.StatusRequestEntityTooLarge)
	sleeper := e.submit(admin, "name: sleeper\nproject: ml\ncommand: [sleep, '60']\n")

	id := job.ID.String()
	e.waitState(admin, job.ID, queue.StateSucceeded)
	call("GET", "/v1/jobs/{id}", "/v1/jobs/"+id, "", nil, 200)
	var st control.JobStatus
	call("GET", "/v1/jobs/{id}/status", "/v1/jobs/"+id+"/status", "", nil, 200).json(t, &st)
	if len(st.Attempts) != 1 || len(st.History) < 4 {
		t.Fatalf("status must carry the attempt and the history: %+v", st)
	}
	call("GET", "/v1/jobs/{id}", "/v1/jobs/00000000-0000-0000-0000-000000000001", "", nil, 404)
	call("GET", "/v1/jobs/{id}", "/v1/jobs/not-a-uuid", "", nil, 422)

	// List: filters and cursor pages.
	var page httpapi.JobPage
	call("GET", "/v1/jobs", "/v1/jobs?limit=1", "", nil, 200).json(t, &page)
	if len(page.Jobs) != 1 || page.NextCursor == "" {
		t.Fatalf("first page of one: %+v", page)
	}
	first := page.Jobs[0].ID
	cursor := page.NextCursor
	page = httpapi.JobPage{}
	call("GET", "/v1/jobs", "/v1/jobs?limit=1&cursor="+cursor, "", nil, 200).json(t, &page)
	if len(page.Jobs) != 1 || page.Jobs[0].ID == first || page.NextCursor != "" {
		t.Fatalf("second and last page: %+v", page)
	}
	page = httpapi.JobPage{}
	call("GET", "/v1/jobs", "/v1/jobs?label=team%3Dvision&state=succeeded&project=ml&since="+url.QueryEscape(time.Now().Add(-time.Hour).Format(time.RFC3339)), "", nil, 200).json(t, &page)
	if len(page.Jobs) != 1 || page.Jobs[0].ID != job.ID {
		t.Fatalf("label, state, project and since filters: %+v", page)
	}
	call("GET", "/v1/jobs", "/v1/jobs?limit=501", "", nil, 422)
	call("GET", "/v1/jobs", "/v1/jobs?cursor=garbage", "", nil, 422)

	// Logs: a range, then followed as events ending with "end".
	var logs httpapi.LogPage
	call("GET", "/v1/jobs/{id}/logs", "/v1/jobs/"+id+"/logs", "", nil, 200).json(t, &logs)
	if len(logs.Chunks) != 1 || logs.Chunks[0].Data != "hello\n" || logs.NextAfter != logs.Chunks[0].Seq {
		t.Fatalf("log range: %+v", logs)
	}
	call("GET", "/v1/jobs/{id}/logs", "/v1/jobs/"+id+"/logs?after="+itoa(logs.NextAfter), "", nil, 200).json(t, &logs)
	if len(logs.Chunks) != 0 {
		t.Fatalf("nothing after the last chunk: %+v", logs)
	}
	evs := e.events("/v1/jobs/"+id+"/logs?follow=true", admin, nil, 10*time.Second, nil)
	if len(evs) != 2 || evs[0].Event != "log" || !strings.Contains(evs[0].Data, `hello\n`) || evs[1].Event != "end" || !strings.Contains(evs[1].Data, "succeeded") {
		t.Fatalf("followed logs of a finished job: %+v", evs)
	}

	// Events: the whole history, ending with the terminal state; resumed
	// after the second with Last-Event-ID.
	evs = e.events("/v1/jobs/"+id+"/events", admin, nil, 10*time.Second, nil)
	if len(evs) != 4 || !strings.Contains(evs[3].Data, `"succeeded"`) {
		t.Fatalf("job events: %+v", evs)
	}
	resumed := e.events("/v1/jobs/"+id+"/events", admin, []string{"Last-Event-ID", evs[1].ID}, 10*time.Second, nil)
	if len(resumed) != 2 || resumed[0].ID != evs[2].ID {
		t.Fatalf("resumed after %s: %+v", evs[1].ID, resumed)
	}
	began := time.Now()
	if after := e.events("/v1/jobs/"+id+"/events", admin, []string{"Last-Event-ID", evs[3].ID}, 10*time.Second, nil); len(after) != 0 || time.Since(began) > 5*time.Second {
		t.Fatalf("resumed after the terminal event, the stream must end at once, empty; it took %s: %+v", time.Since(began), after)
	}

	// Results: listed, the archive, one file.
	var res httpapi.Results
	call("GET", "/v1/jobs/{id}/results", "/v1/jobs/"+id+"/results", "", nil, 200).json(t, &res)
	if len(res.Files) != 1 || res.Files[0].Path != "out.txt" {
		t.Fatalf("results: %+v", res)
	}
	r = call("GET", "/v1/jobs/{id}/results/archive", "/v1/jobs/"+id+"/results/archive", "", nil, 200)
	if r.Header.Get("X-Gpuq-Sha256") != res.SHA256 || !archiveHolds(t, r.Body, "out.txt", "result\n") {
		t.Fatalf("archive: %d bytes, sha %s", len(r.Body), r.Header.Get("X-Gpuq-Sha256"))
	}
	r = call("GET", "/v1/jobs/{id}/results/file", "/v1/jobs/"+id+"/results/file?path=out.txt", "", nil, 200)
	if string(r.Body) != "result\n" {
		t.Fatalf("file: %q", r.Body)
	}
	call("GET", "/v1/jobs/{id}/results/file", "/v1/jobs/"+id+"/results/file?path=missing.txt", "", nil, 404)
	call("GET", "/v1/jobs/{id}/results", "/v1/jobs/"+sleeper.ID.String()+"/results", "", nil, 409)

	call("GET", "/v1/jobs/{id}/checkpoints", "/v1/jobs/"+id+"/checkpoints", "", nil, 200)
	var pl httpapi.PlacementView
	call("GET", "/v1/jobs/{id}/placement", "/v1/jobs/"+id+"/placement", "", nil, 200).json(t, &pl)
	if pl.Pool != "de-cpu" || !strings.Contains(string(pl.Decision), "chosen") {
		t.Fatalf("placement: %+v", pl)
	}
	// explain=true recomputes the full decision: every offer, each rejected
	// one with its reasons.
	var explained httpapi.PlacementView
	call("GET", "/v1/jobs/{id}/placement", "/v1/jobs/"+id+"/placement?explain=true", "", nil, 200).json(t, &explained)
	var full policy.Decision
	if err := json.Unmarshal(explained.Decision, &full); err != nil || full.Chosen == nil || full.Chosen.Offer.Pool != "de-cpu" ||
		len(full.Offers) == 0 || full.Feasible+full.RejectedCount() != len(full.Offers) {
		t.Fatalf("explained placement (%v): %s", err, explained.Decision)
	}
	for _, r := range full.Rejected() {
		if len(full.ReasonsOf(r)) == 0 {
			t.Fatalf("rejected offer %s has no reason", full.Offers[r.Offer].Pool)
		}
	}

	// Cancel: the running sleeper stops; a second cancel is 409.
	e.waitState(admin, sleeper.ID, queue.StateRunning)
	if _, err := e.Store.RecordCheckpoint(context.Background(), sleeper.ID, 1, queue.ArchiveRecord{Bytes: 3, SHA256: "abc", Region: "eu-local-1", StoreURI: "obj://b/c"}); err != nil {
		t.Fatal(err)
	}
	var cps []queue.Checkpoint
	call("GET", "/v1/jobs/{id}/checkpoints", "/v1/jobs/"+sleeper.ID.String()+"/checkpoints", "", nil, 200).json(t, &cps)
	if len(cps) != 1 || cps[0].Seq != 1 || cps[0].Region != "eu-local-1" {
		t.Fatalf("checkpoints: %+v", cps)
	}
	var cancelled queue.Job
	call("POST", "/v1/jobs/{id}/cancel", "/v1/jobs/"+sleeper.ID.String()+"/cancel", "", nil, 200).json(t, &cancelled)
	if cancelled.State != queue.StateCancelled {
		t.Fatalf("cancelled job is %s", cancelled.State)
	}
	call("POST", "/v1/jobs/{id}/cancel", "/v1/jobs/"+sleeper.ID.String()+"/cancel", "", nil, 409)

	// Retry: a failed job runs again as attempt 2 under placement 2 (it may
	// have been claimed, and even have failed again, by the time the answer
	// is read); a retry of a job not finished is 409.
	failing := e.submit(admin, "command: [sh, -c, 'exit 3']\nretries: {max_errors: 0}\n")
	e.waitState(admin, failing.ID, queue.StateFailed)
	var retried queue.Job
	call("POST", "/v1/jobs/{id}/retry", "/v1/jobs/"+failing.ID.String()+"/retry", "", nil, 200).json(t, &retried)
	if retried.PlacementVersion != 2 || retried.Pool != "de-cpu" {
		t.Fatalf("retried job: %+v", retried)
	}
	call("POST", "/v1/jobs/{id}/retry", "/v1/jobs/"+sleeper.ID.String()+"/retry", "", nil, 200)
	call("POST", "/v1/jobs/{id}/retry", "/v1/jobs/"+sleeper.ID.String()+"/retry", "", nil, 409)
	call("POST", "/v1/jobs/{id}/cancel", "/v1/jobs/"+sleeper.ID.String()+"/cancel", "", nil, 200)
	e.waitState(admin, failing.ID, queue.StateFailed)
	var rerun queue.Job
	e.do("GET", "/v1/jobs/"+failing.ID.String(), admin, "", nil).json(t, &rerun)
	if rerun.Attempt != 2 || rerun.Errors != 1 {
		t.Fatalf("the retried job ran as attempt %d with %d errors, want attempt 2 with 1", rerun.Attempt, rerun.Errors)
	}

	// Plan: feasible, and refused with every reason.
	var plan httpapi.Plan
	call("POST", "/v1/plan", "/v1/plan", "application/yaml", []byte("command: [x]\nplacement: {residency: EU}\n"), 200).json(t, &plan)
	if !plan.Feasible {
		t.Fatalf("an EU CPU job fits the German pool: %+v", plan)
	}
	call("POST", "/v1/plan", "/v1/plan", "application/yaml", []byte("command: [x]\nresources: {gpu: {count: 1}}\n"), 200).json(t, &plan)
	if plan.Feasible || plan.Reason == "" || len(plan.Counts) != 1 || plan.Counts[0].Offers != 1 || plan.Relaxation == nil {
		t.Fatalf("no pool has a GPU: want the refusal with its reason counted and the relaxation, got %+v", plan)
	}
	r = call("POST", "/v1/plan", "/v1/plan", "application/yaml", []byte("command: [x]\nplacement: {residency: XX}\n"), 422)
	if !strings.Contains(string(r.Body), `"location":"spec.placement.residency"`) {
		t.Fatalf("an unknown residency class must be located: %s", r.Body)
	}
	// The outputs of a job bound to France keep that residency: a plan of
	// a job reading them finds the German pool outside it.
	french := uuid.New()
	frenchSpec, err := queue.ParseSpec([]byte("project: " + failing.Spec.Project + "\ncommand: [x]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.RecordJobs(context.Background(), []queue.NewJob{{ID: french, Spec: frenchSpec}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.RecordPlacements(context.Background(), []queue.PlacedJob{{JobID: french, Placement: queue.Placement{
		Version: 1, Pool: "fr-cpu", Region: "eu-west-3", Residency: "FR", Countries: []string{"FR"}}}}); err != nil {
		t.Fatal(err)
	}
	reads := fmt.Sprintf("project: %s\ncommand: [x]\ninputs: [{job: %s}]\n", failing.Spec.Project, french)
	call("POST", "/v1/plan", "/v1/plan", "application/yaml", []byte(reads), 200).json(t, &plan)
	if plan.Feasible || !strings.Contains(plan.Reason, "1 offer outside residency FR") ||
		!strings.Contains(string(plan.Decision), "region eu-local-1 (DE) outside residency FR required by inputs[0] (job "+french.String()+")") ||
		strings.Contains(string(plan.Decision), `"notes"`) {
		t.Fatalf("a plan reading outputs bound to France: %+v", plan)
	}
	r = call("POST", "/v1/plan", "/v1/plan", "application/yaml", []byte(fmt.Sprintf("command: [x]\ninputs: [{job: %s}]\n", uuid.New())), 422)
	if !strings.Contains(string(r.Body), `"location":"spec.inputs[0].job"`) {
		t.Fatalf("a plan reading the outputs of no job must be refused naming the input: %s", r.Body)
	}
	var offers httpapi.OfferList
	call("GET", "/v1/offers", "/v1/offers", "", nil, 200).json(t, &offers)
	if len(offers.Offers) != 1 || offers.Offers[0].Pool != "de-cpu" || offers.BaseCurrency != "EUR" || offers.ExchangeRates == nil {
		t.Fatalf("offers, with the policy's base currency and rates: %+v", offers)
	}
	call("GET", "/v1/projects/{project}/spend", "/v1/projects/ml/spend", "", nil, 200)
	call("GET", "/v1/projects/{project}/spend", "/v1/projects/other/spend", "", nil, 404)
	// A project that no name can be (a typo's capital) is refused naming
	// the parameter, rather than answered with an empty list.
	for path, op := range map[string]string{
		"/v1/jobs?project=ML":                                "/v1/jobs",
		"/v1/projects/ML/spend":                              "/v1/projects/{project}/spend",
		"/v1/projects/ml%20x/events":                         "/v1/projects/{project}/events",
		"/v1/tokens?project=-ml":                             "/v1/tokens",
		"/v1/projects/ml!/budgets":                           "/v1/projects/{project}/budgets",
		"/v1/projects/" + strings.Repeat("m", 64) + "/quota": "/v1/projects/{project}/quota",
	} {
		loc := "query.project"
		if strings.HasPrefix(path, "/v1/projects/") {
			loc = "path.project"
		}
		if r := call("GET", op, path, "", nil, 422); !strings.Contains(string(r.Body), `"location":"`+loc+`"`) {
			t.Errorf("GET %s: want a 422 locating %s, got %s", path, loc, r.Body)
		}
	}
	if _, _, err := e.Store.RecordCanary(context.Background(), queue.CanaryRecord{NodeID: "node-1", Pool: "de-cpu", Host: "h1", OK: true, Summary: "ok", Report: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	var nodes []queue.Node
	call("GET", "/v1/nodes", "/v1/nodes", "", nil, 200).json(t, &nodes)
	if len(nodes) != 1 || nodes[0].ID != "node-1" {
		t.Fatalf("nodes: %+v", nodes)
	}
	if _, err := e.Store.RecordInstance(context.Background(), queue.NewInstance{ID: "gq-1", Provider: "sim", Pool: "de-cpu", ClientToken: "gq-1",
		Slots: 1, PriceMicros: 100_000, Currency: "EUR", Billing: queue.BillPerSecond}); err != nil {
		t.Fatal(err)
	}
	var instances []queue.Instance
	call("GET", "/v1/instances", "/v1/instances?pool=de-cpu&state=requested", "", nil, 200).json(t, &instances)
	if len(instances) != 1 || instances[0].ID != "gq-1" || instances[0].State != queue.InstanceRequested {
		t.Fatalf("instances: %+v", instances)
	}
	call("GET", "/v1/instances", "/v1/instances?state=ready", "", nil, 200).json(t, &instances)
	if len(instances) != 0 {
		t.Fatalf("instances in state ready: %+v", instances)
	}
	if r := call("GET", "/v1/instances", "/v1/instances?state=gone", "", nil, 422); !strings.Contains(string(r.Body), "query.state") {
		t.Fatalf("a bad state must be located: %s", r.Body)
	}

	// Tokens: created (the secret once), listed without it, revoked.
	var created httpapi.CreatedToken
	call("POST", "/v1/tokens", "/v1/tokens", "application/json", []byte(`{"projects":["ml"],"role":"read","name":"dash"}`), 201).json(t, &created)
	if e.do("GET", "/v1/jobs", created.Token, "", nil).Status != 200 {
		t.Fatal("a created token must work")
	}
	r = call("GET", "/v1/tokens", "/v1/tokens", "", nil, 200)
	if bytes.Contains(r.Body, []byte(created.Token)) || !bytes.Contains(r.Body, []byte(created.Record.Prefix)) {
		t.Fatalf("token list must show prefixes, never secrets: %s", r.Body)
	}
	call("POST", "/v1/tokens", "/v1/tokens", "application/json", []byte(`{"projects":["other"],"role":"read"}`), 403)
	call("DELETE", "/v1/tokens/{id}", "/v1/tokens/"+created.Record.ID.String(), "", nil, 204)
	if got := e.do("GET", "/v1/jobs", created.Token, "", nil).Status; got != 401 {
		t.Fatalf("a revoked token got %d, want 401", got)
	}
	doc.check(t, "GET", "/v1/healthz", e.do("GET", "/v1/healthz", "", "", nil))
}

func TestProjectEventsStreamOnlyThatProjectsJobs(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	tok := e.token(queue.RoleSubmit, nil, "a", "b")
	got := make(chan []sseEvent, 1)
	go func() {
		got <- e.events("/v1/projects/a/events", tok, nil, 20*time.Second, func(ev sseEvent) bool {
			return strings.Contains(ev.Data, `"succeeded"`)
		})
	}()
	time.Sleep(300 * time.Millisecond) // the stream delivers only new events
	e.submit(tok, "project: b\ncommand: [/bin/true]\n")
	ja := e.submit(tok, "project: a\ncommand: [/bin/true]\n")
	evs := <-got
	if len(evs) < 4 {
		t.Fatalf("project a's stream: %+v", evs)
	}
	for _, ev := range evs {
		var pe httpapi.ProjectEvent
		json.Unmarshal([]byte(ev.Data), &pe) //nolint:errcheck // checked below
		if pe.Project != "a" || pe.JobID != ja.ID {
			t.Fatalf("project a's stream carried %s", ev.Data)
		}
	}
}

func archiveHolds(t *testing.T, archive []byte, name, content string) bool {
	t.Helper()
	zr, err := zstd.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if err != nil {
			return false
		}
		if strings.TrimPrefix(hdr.Name, "./") == name {
			var b bytes.Buffer
			b.ReadFrom(tr) //nolint:errcheck // compared below
			return b.String() == content
		}
	}
}

// TestReadmeHTTPExampleRuns runs the README's HTTP API example, as it is,
// against a real server.
func TestReadmeHTTPExampleRuns(t *testing.T) {
	t.Parallel()
	readme := string(mustRead(t, "../../../README.md"))
	_, rest, ok := strings.Cut(readme, "<!-- http-example -->\n```sh\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("README.md has no http-example block")
	}
	e := startEnv(t, nil)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Env = append(os.Environ(), "GPUQ_URL="+e.URL, "GPUQ_TOKEN="+e.token(queue.RoleSubmit, nil, queue.DefaultProject))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README example failed: %v\n%s", err, out)
	}
	for _, want := range []string{`"state":"succeeded"`, `hello from the API`, `"pool":"de-cpu"`, `"location":"spec.resources.gpu.count"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the README example's output lacks %s:\n%s", want, out)
		}
	}
}
