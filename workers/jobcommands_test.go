package workers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/cmd/gpuq/cli"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/workers"
)

// gpuq runs a gpuq command in-process, checks its exit status and returns
// stdout and stderr apart.
func gpuq(t *testing.T, wantCode int, args ...string) (string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := cli.Main(args, &out, &errOut); code != wantCode {
		t.Fatalf("gpuq %v: exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, wantCode, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

// decodeJob parses a job printed with -o json, refusing the job_id spelling.
func decodeJob(t *testing.T, out string) *queue.Job {
	t.Helper()
	var fields map[string]any
	if err := json.Unmarshal([]byte(out), &fields); err != nil {
		t.Fatalf("want one JSON job, got %v:\n%s", err, out)
	}
	if _, ok := fields["job_id"]; ok {
		t.Fatalf("a job prints its id as \"id\", never \"job_id\":\n%s", out)
	}
	var j queue.Job
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.ID == uuid.Nil {
		t.Fatalf("want a job with its id, got %v:\n%s", err, out)
	}
	return &j
}

func TestSubmitReturnsOnceTheSchedulerAcceptedOrRejectedTheJob(t *testing.T) {
	t.Parallel()
	c := newCluster(t) // no worker: an accepted job stays placed
	conn := []string{"--nats-url", c.n.URL}

	out, errOut := gpuq(t, cli.ExitRejected, append(append([]string{"submit", "-o", "json", "--residency", "EUU"}, conn...), "--", "true")...)
	j := decodeJob(t, out)
	if j.State != queue.StateRejected || !strings.Contains(errOut, `undefined residency class "EUU"`) {
		t.Fatalf("a typo'd residency class must be rejected with the reason on stderr: state %s\n%s", j.State, errOut)
	}

	out, _ = gpuq(t, 0, append(append([]string{"submit", "--name", "ok"}, conn...), "--", "true")...)
	id, err := uuid.Parse(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("submit prints the job id alone: %q", out)
	}
	if got := c.job(t, id).State; got != queue.StatePlaced {
		t.Fatalf("when submit returns the scheduler has placed the job; it is %s", got)
	}

	// Fire and forget does not wait for the answer.
	out, _ = gpuq(t, 0, "submit", "--nats-url", c.n.URL, "--no-wait-accept", "--residency", "EUU", "--", "true")
	id, err = uuid.Parse(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("submit --no-wait-accept prints the job id: %q", out)
	}
	c.waitState(t, id, queue.StateRejected, 30*time.Second)
}

func TestJobCommandsTellOutcomesApartByExitStatus(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startWorker(t, 5*time.Second, time.Second)
	conn := []string{"--nats-url", c.n.URL}
	with := func(args ...string) []string { return append(args, conn...) }

	// (wait, over NATS, first gives a just-submitted job RecordWait to be
	// recorded; its not-found is tested over HTTP below.)
	gpuq(t, cli.ExitNotFound, with("status", uuid.NewString())...)

	out, _ := gpuq(t, 0, append(with("submit", "--name", "sleepy"), "--", "sleep", "60")...)
	id := strings.TrimSpace(out)
	c.waitState(t, uuid.MustParse(id), queue.StateRunning, 60*time.Second)
	gpuq(t, cli.ExitTimedOut, with("wait", id, "--timeout", "1s")...)
	out, _ = gpuq(t, 0, with("cancel", id, "-o", "json")...)
	if j := decodeJob(t, out); j.State != queue.StateCancelled {
		t.Fatalf("cancel -o json prints the cancelled job, got state %s", j.State)
	}
	gpuq(t, cli.ExitCancelled, with("wait", id)...)

	out, errOut := gpuq(t, cli.ExitFailed, append(with("submit", "--wait", "-o", "json", "--name", "bad", "--max-errors", "0"), "--", "sh", "-c", "exit 4")...)
	if j := decodeJob(t, out); j.State != queue.StateFailed || !strings.Contains(errOut, "exited with status 4") {
		t.Fatalf("submit --wait prints the failed job on stdout and the reason on stderr: %s\n%s", j.State, errOut)
	}

	// submit --wait: the outcome on stdout; progress on stderr, which is
	// no terminal here, as plain lines.
	out, errOut = gpuq(t, 0, append(with("submit", "--wait", "--name", "quiet"), "--", "sleep", "1")...)
	fields := strings.Fields(out)
	if len(fields) != 2 || uuid.Validate(fields[0]) != nil || fields[1] != "succeeded" {
		t.Fatalf("submit --wait prints the id and the outcome, got %q", out)
	}
	if strings.ContainsAny(errOut, "\r\033") || !strings.Contains(errOut, fields[0]+" succeeded attempt 1") {
		t.Fatalf("progress on a pipe is one plain line per state change:\n%q", errOut)
	}

	// A succeeded job that wrote no outputs: results says so and exits 0.
	out, _ = gpuq(t, 0, with("results", fields[0], "--dir", t.TempDir())...)
	if !strings.Contains(out, "no outputs") {
		t.Fatalf("results of a job without outputs must say so, got %q", out)
	}
	out, _ = gpuq(t, 0, with("results", fields[0], "--dir", t.TempDir(), "-o", "json")...)
	var res cli.Results
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Files == nil || len(res.Files) != 0 {
		t.Fatalf("results -o json lists no files for a job without outputs: %v\n%s", err, out)
	}

	out, _ = gpuq(t, 0, with("ls", "-o", "json")...)
	var page struct {
		Jobs []map[string]any `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Jobs) != 3 || page.Jobs[0]["id"] != fields[0] {
		t.Fatalf("ls -o json is the API's page of jobs, newest first: %v\n%s", err, out)
	}
}

// apiGet reads one document of the API as a generic JSON value.
func apiGet(t *testing.T, base, token, path string) any {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc any
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return doc
}

func sameJSON(t *testing.T, what, printed string, want any) {
	t.Helper()
	var got any
	if err := json.Unmarshal([]byte(printed), &got); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", what, err, printed)
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Fatalf("%s -o json must equal the API's document\nprinted:\n%s\nAPI:\n%s", what, g, w)
	}
}

func TestJobCommandsOverHTTPNeedOnlyTheURLAndATokenAndPrintTheAPIsDocuments(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startWorker(t, 5*time.Second, time.Second)
	srv, err := httpapi.New(httpapi.Config{Store: c.store, JS: c.n.JS, NATS: c.n.NC, Archives: &workers.ObjectStore{JS: c.n.JS}})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(srv.Handler())
	t.Cleanup(api.Close)
	secret, tok, err := queue.NewTokenSecret("cli test", []string{queue.DefaultProject}, queue.RoleSubmit, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.store.CreateToken(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	// The URL and token in a config file, as `gpuq dev` writes them; no
	// NATS or PostgreSQL setting anywhere.
	config := filepath.Join(t.TempDir(), "gpuq.yaml")
	if err := os.WriteFile(config, []byte("url: "+api.URL+"\ntoken: "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	with := func(args ...string) []string { return append(args, "--config", config) }

	out, _ := gpuq(t, 0, append(with("submit", "--wait", "-o", "json", "--name", "hi"), "--", "echo", "hi over http")...)
	job := decodeJob(t, out)
	id := job.ID.String()
	sameJSON(t, "submit --wait", out, apiGet(t, api.URL, secret, "/v1/jobs/"+id))
	out, _ = gpuq(t, 0, with("status", id, "-o", "json")...)
	sameJSON(t, "status", out, apiGet(t, api.URL, secret, "/v1/jobs/"+id+"/status"))
	direct, _ := gpuq(t, 0, "status", id, "-o", "json", "--nats-url", c.n.URL)
	sameJSON(t, "status over NATS", direct, apiGet(t, api.URL, secret, "/v1/jobs/"+id+"/status"))
	out, _ = gpuq(t, 0, with("ls", "-o", "json")...)
	sameJSON(t, "ls", out, apiGet(t, api.URL, secret, "/v1/jobs?limit=50"))

	if out, _ = gpuq(t, 0, with("logs", id)...); out != "hi over http\n" {
		t.Fatalf("logs over HTTP: got %q", out)
	}
	if out, _ = gpuq(t, 0, with("logs", "-f", id)...); out != "hi over http\n" {
		t.Fatalf("logs -f over HTTP ends with the job: got %q", out)
	}
	if out, _ = gpuq(t, 0, with("results", id, "--dir", t.TempDir())...); !strings.Contains(out, "no outputs") {
		t.Fatalf("results over HTTP of a job without outputs: %q", out)
	}
	_, errOut := gpuq(t, cli.ExitRejected, append(with("submit", "--residency", "EUU"), "--", "true")...)
	if !strings.Contains(errOut, `undefined residency class "EUU"`) {
		t.Fatalf("a rejection over HTTP names the reason: %s", errOut)
	}
	gpuq(t, cli.ExitNotFound, with("wait", uuid.NewString())...)

	out, _ = gpuq(t, 0, append(with("submit", "--name", "long"), "--", "sleep", "60")...)
	long := strings.TrimSpace(out)
	gpuq(t, 0, with("cancel", long)...)
	gpuq(t, cli.ExitCancelled, with("wait", long)...)
	_, errOut = gpuq(t, cli.ExitGeneral, with("cancel", long)...)
	if !strings.Contains(errOut, "already finished") {
		t.Fatalf("cancelling a finished job over HTTP says so: %s", errOut)
	}
}
