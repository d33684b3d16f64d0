package workers_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/cmd/gpuq/cli"
	"github.com/gpuq/gpuq/queue"
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
	conn := []string{"--nats-url", c.n.URL, "--database-url", c.dbURL}

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

	// Fire and forget needs no database and does not wait for the answer.
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
	conn := []string{"--nats-url", c.n.URL, "--database-url", c.dbURL}
	with := func(args ...string) []string { return append(args, conn...) }

	gpuq(t, cli.ExitNotFound, with("wait", uuid.NewString())...)
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
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Jobs) != 4 || page.Jobs[0]["id"] != fields[0] {
		t.Fatalf("ls -o json is the API's page of jobs, newest first: %v\n%s", err, out)
	}
}
