package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control/httpapi"
)

// A sweep submitted as one batch: each spec is checked as POST /v1/jobs
// checks one, a bad one refuses the whole batch naming it and submits
// nothing, and the answer lists the jobs in the specs' order with the
// status each would have had alone; a repeat with the same keys names the
// same jobs.
func TestABatchSubmitsASweepInOrderOrNothingAtAll(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	doc := loadOpenAPI(t)
	tok := e.token(queue.RoleSubmit, nil, "ml")
	post := func(contentType, body string, want int) *response {
		t.Helper()
		r := e.do("POST", "/v1/jobs/batch", tok, contentType, []byte(body))
		if r.Status != want {
			t.Fatalf("POST /v1/jobs/batch: %d, want %d: %s", r.Status, want, r.Body)
		}
		doc.check(t, "POST", "/v1/jobs/batch", r)
		return r
	}
	jobsOf := func() int {
		t.Helper()
		var page httpapi.JobPage
		e.do("GET", "/v1/jobs?limit=500", tok, "", nil).json(t, &page)
		return len(page.Jobs)
	}

	var specs []string
	for i := range 25 {
		specs = append(specs, fmt.Sprintf(`{"name": "lr-%d", "command": ["true"], "labels": {"sweep": "lr"}, "idempotency_key": "lr-%d"}`, i, i))
	}
	body := `{"jobs": [` + strings.Join(specs, ", ") + `]}`
	var batch httpapi.Batch
	post("application/json", body, http.StatusOK).json(t, &batch)
	if len(batch.Jobs) != 25 {
		t.Fatalf("25 specs answered %d jobs", len(batch.Jobs))
	}
	for i, it := range batch.Jobs {
		if it.Status != http.StatusCreated || it.Job == nil || it.Job.Name != fmt.Sprintf("lr-%d", i) || it.Job.Project != "ml" || it.Job.State == queue.StatePending {
			t.Fatalf("job %d of the batch: %+v; want lr-%d created in project ml and placed", i, it, i)
		}
	}
	var again httpapi.Batch
	post("application/json", body, http.StatusOK).json(t, &again)
	for i, it := range again.Jobs {
		if it.Status != http.StatusOK || it.Job.ID != batch.Jobs[i].Job.ID {
			t.Fatalf("a repeated batch: job %d answered %d %s, want 200 %s", i, it.Status, it.Job.ID, batch.Jobs[i].Job.ID)
		}
	}
	if n := jobsOf(); n != 25 {
		t.Fatalf("after a batch and its repeat the project holds %d jobs, want 25", n)
	}
	// As YAML, without keys: new jobs each time.
	var yamlBatch httpapi.Batch
	post("application/yaml", "jobs:\n  - {name: a, command: [\"true\"]}\n  - {name: b, command: \"echo b\"}\n", http.StatusOK).json(t, &yamlBatch)
	if len(yamlBatch.Jobs) != 2 || yamlBatch.Jobs[1].Job.Name != "b" || yamlBatch.Jobs[1].Status != http.StatusCreated {
		t.Fatalf("a YAML batch: %+v", yamlBatch)
	}

	// Refused batches, each changing nothing.
	for _, c := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"a bad spec", `{"jobs": [{"command": ["true"]}, {"command": ["true"], "resources": {"gpu": {"count": 0}}}]}`, 422, `"location":"body.jobs[1].resources.gpu.count"`},
		{"an unknown field", `{"jobs": [{"command": ["true"], "gpus": 1}]}`, 422, `"location":"body.jobs[0].gpus"`},
		{"no jobs", `{"jobs": []}`, 422, `"location":"body.jobs"`},
		{"too many jobs", `{"jobs": [` + strings.Repeat(`{"command": ["true"]}, `, httpapi.MaxBatchJobs) + `{"command": ["true"]}]}`, 422, "got 501"},
		{"not a batch", `[{"command": ["true"]}]`, 422, `"location":"body"`},
		{"a key of the batch", `{"jobs": [{"command": ["true"], "idempotency_key": "k"}, {"command": ["false"], "idempotency_key": "k"}]}`, 409, `"location":"body.jobs[1].idempotency_key"`},
		{"a key used before", `{"jobs": [{"command": ["true"]}, {"name": "other", "command": ["true"], "idempotency_key": "lr-3"}]}`, 409, `"location":"body.jobs[1].idempotency_key"`},
		{"another project", `{"jobs": [{"command": ["true"]}, {"project": "vision", "command": ["true"]}]}`, 403, `"location":"body.jobs[1].project"`},
	} {
		r := post("application/json", c.body, c.status)
		if !strings.Contains(string(r.Body), c.want) {
			t.Errorf("%s: %s, want it to name %s", c.name, r.Body, c.want)
		}
	}
	if n := jobsOf(); n != 27 {
		t.Fatalf("refused batches submitted jobs: the project holds %d, want 27", n)
	}
	// The document states the bound the server holds to.
	schemas := doc.doc["components"].(map[string]any)["schemas"].(map[string]any)
	jobs := schemas["BatchRequest"].(map[string]any)["properties"].(map[string]any)["jobs"].(map[string]any)
	if got := fmt.Sprint(jobs["maxItems"]); got != fmt.Sprint(httpapi.MaxBatchJobs) {
		t.Fatalf("the OpenAPI document's BatchRequest.jobs.maxItems is %v, want %d", jobs["maxItems"], httpapi.MaxBatchJobs)
	}
}

// Every ten jobs of a batch count as one request against the token's rate
// limit: a batch larger than what is left is refused with Retry-After and
// submits nothing.
func TestABatchCountsAgainstTheRateLimitByItsJobs(t *testing.T) {
	t.Parallel()
	e := startEnv(t, func(c *httpapi.Config) { c.RatePerSecond, c.Burst = 0.5, 10 })
	tok := e.token(queue.RoleSubmit, nil, "ml")
	batch := func(n int) string {
		return `{"jobs": [` + strings.TrimSuffix(strings.Repeat(`{"command": ["true"]}, `, n), ", ") + `]}`
	}
	if r := e.do("POST", "/v1/jobs/batch", tok, "application/json", []byte(batch(80))); r.Status != http.StatusOK {
		t.Fatalf("a batch of 80 jobs (8 requests of a burst of 10): %d %s", r.Status, r.Body)
	}
	r := e.do("POST", "/v1/jobs/batch", tok, "application/json", []byte(batch(30)))
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" || !strings.Contains(string(r.Body), "counts as 3 requests") {
		t.Fatalf("a batch of 30 jobs with 2 requests left: %d, Retry-After %q, %s; want 429", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	var page httpapi.JobPage
	e.do("GET", "/v1/jobs?limit=500", tok, "", nil).json(t, &page)
	if len(page.Jobs) != 80 {
		t.Fatalf("the refused batch submitted jobs: %d, want 80", len(page.Jobs))
	}
}
