package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

// Over the API, a job that runs after another is answered recorded and
// waiting, its status names the jobs it runs after with their states, and
// a job its project does not hold is refused at its place in spec.after
// (body.jobs[i].after[j] in a batch), nothing submitted. When the job it
// runs after is cancelled, the waiting job is cancelled, saying why, and a
// job to run once it has ended (spec.after_ended) runs.
func TestAJobThatRunsAfterAnotherWaitsAndSaysForWhatOverTheAPI(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	doc := loadOpenAPI(t)
	tok := e.token(queue.RoleSubmit, nil, "ml")
	vision := e.token(queue.RoleSubmit, nil, "vision")
	prep := e.submit(tok, "project: ml\nname: prep\ncommand: [sleep, \"60\"]\n")
	e.waitState(tok, prep.ID, queue.StateRunning)
	train := e.submit(tok, fmt.Sprintf("project: ml\nname: train\ncommand: [/bin/true]\nafter: [%s]\n", prep.ID))
	if train.State != queue.StateWaiting || train.Pool != "" {
		t.Fatalf("submitted after prep: %+v, want waiting on no pool", train)
	}
	r := e.do("GET", "/v1/jobs/"+train.ID.String()+"/status", tok, "", nil)
	doc.check(t, "GET", "/v1/jobs/{id}/status", r)
	var st control.JobStatus
	r.json(t, &st)
	if len(st.After) != 1 || st.After[0].ID != prep.ID || st.After[0].Name != "prep" || st.After[0].State != queue.StateRunning {
		t.Fatalf("status after: %+v", st.After)
	}
	r = e.do("GET", "/v1/jobs?state=waiting&project=ml", tok, "", nil)
	doc.check(t, "GET", "/v1/jobs", r)
	if r.Status != http.StatusOK || !strings.Contains(string(r.Body), train.ID.String()) {
		t.Fatalf("listing waiting jobs: %d %s", r.Status, r.Body)
	}

	// Another project's job is no job of this one; nor is an id of none.
	other := e.submit(vision, "project: vision\ncommand: [/bin/true]\n")
	for _, dep := range []uuid.UUID{other.ID, uuid.New()} {
		r = e.do("POST", "/v1/jobs", tok, "application/yaml", []byte(fmt.Sprintf("project: ml\ncommand: [/bin/true]\nafter: [%s, %s]\n", prep.ID, dep)))
		if r.Status != http.StatusUnprocessableEntity {
			t.Fatalf("after %s: %d %s", dep, r.Status, r.Body)
		}
		doc.check(t, "POST", "/v1/jobs", r)
		problemAt(t, r, "spec.after[1]", fmt.Sprintf("no job %s in project ml", dep))
	}
	batch := fmt.Sprintf(`{"jobs": [{"project": "ml", "command": ["/bin/true"], "after": ["%s"]}, {"project": "ml", "command": ["/bin/true"], "after": ["%s"]}]}`, prep.ID, other.ID)
	r = e.do("POST", "/v1/jobs/batch", tok, "application/json", []byte(batch))
	if r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("a batch with one bad after: %d %s", r.Status, r.Body)
	}
	problemAt(t, r, "body.jobs[1].after[0]", "no job "+other.ID.String()+" in project ml")
	r = e.do("POST", "/v1/jobs", tok, "application/yaml", []byte(fmt.Sprintf("project: ml\ncommand: [/bin/true]\nafter_ended: [%s]\n", other.ID)))
	doc.check(t, "POST", "/v1/jobs", r)
	problemAt(t, r, "spec.after_ended[0]", "no job "+other.ID.String()+" in project ml")
	batch = fmt.Sprintf(`{"jobs": [{"project": "ml", "command": ["/bin/true"], "after": ["%s"], "after_ended": ["%s"]}]}`, prep.ID, other.ID)
	problemAt(t, e.do("POST", "/v1/jobs/batch", tok, "application/json", []byte(batch)), "body.jobs[0].after_ended[0]", "no job "+other.ID.String()+" in project ml")
	var page struct{ Jobs []queue.Job }
	e.do("GET", "/v1/jobs?project=ml", tok, "", nil).json(t, &page)
	if len(page.Jobs) != 2 {
		t.Fatalf("refused submissions recorded jobs: %d jobs in ml, want 2", len(page.Jobs))
	}
	// A job to run once prep has ended, however it ends.
	report := e.submit(tok, fmt.Sprintf("project: ml\nname: report\ncommand: [/bin/true]\nafter_ended: [%s]\n", prep.ID))
	if report.State != queue.StateWaiting {
		t.Fatalf("submitted after prep ended: %+v, want waiting", report)
	}
	r = e.do("GET", "/v1/jobs/"+report.ID.String()+"/status", tok, "", nil)
	doc.check(t, "GET", "/v1/jobs/{id}/status", r)
	st = control.JobStatus{}
	r.json(t, &st)
	if len(st.After) != 0 || len(st.AfterEnded) != 1 || st.AfterEnded[0].Name != "prep" || st.AfterEnded[0].State != queue.StateRunning {
		t.Fatalf("status of report: after %+v, after_ended %+v", st.After, st.AfterEnded)
	}

	// The jobs that run after prep, either way, newest first.
	r = e.do("GET", "/v1/jobs?runs_after="+prep.ID.String(), tok, "", nil)
	doc.check(t, "GET", "/v1/jobs", r)
	page.Jobs = nil
	r.json(t, &page)
	if len(page.Jobs) != 2 || page.Jobs[0].ID != report.ID || page.Jobs[1].ID != train.ID {
		t.Fatalf("jobs that run after prep: %s", r.Body)
	}
	r = e.do("GET", "/v1/jobs?runs_after=prep", tok, "", nil)
	doc.check(t, "GET", "/v1/jobs", r)
	problemAt(t, r, "query.runs_after", `must be a job id as gpuq prints it, got "prep"`)

	if r = e.do("POST", "/v1/jobs/"+prep.ID.String()+"/cancel", tok, "", nil); r.Status != http.StatusOK {
		t.Fatalf("cancel prep: %d %s", r.Status, r.Body)
	}
	e.waitState(tok, train.ID, queue.StateCancelled)
	var j queue.Job
	e.do("GET", "/v1/jobs/"+train.ID.String(), tok, "", nil).json(t, &j)
	if want := fmt.Sprintf("job %s (prep) it runs after ended cancelled", prep.ID); !strings.HasPrefix(j.Reason, want) {
		t.Fatalf("train's reason: %q, want it to start %q", j.Reason, want)
	}
	e.waitState(tok, report.ID, queue.StateSucceeded)
}
