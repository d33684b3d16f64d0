package workers_test

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// cutDatabase refuses every connection to the cluster's database until the
// returned function is called, as a PostgreSQL restart does for the control
// plane: new connections fail and those open are terminated.
func (c *cluster) cutDatabase(t *testing.T) (restore func()) {
	t.Helper()
	u, err := url.Parse(c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	u.Path = "/postgres"
	admin, err := sql.Open("postgres", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	exec := func(q string) {
		t.Helper()
		if _, err := admin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`ALTER DATABASE "` + name + `" ALLOW_CONNECTIONS false`)
	exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '` + name + `' AND pid <> pg_backend_pid()`)
	restored := false
	restore = func() {
		if !restored {
			restored = true
			exec(`ALTER DATABASE "` + name + `" ALLOW_CONNECTIONS true`)
		}
	}
	t.Cleanup(restore)
	return restore
}

// A job that finished while PostgreSQL was down is recorded once the
// database is back, not run again: the worker asks the control plane again,
// with backoff, for up to a lease, keeping the message meanwhile.
func TestCompletionDuringADatabaseOutageIsRecordedAfterwardsWithoutRunningTheJobAgain(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startWorker(t, 10*time.Second, 2*time.Second)
	dir := jobWritable(t)
	runs, proceed := filepath.Join(dir, "runs"), filepath.Join(dir, "go")
	id := c.submit(t, `name: outlives-an-outage
command: [/bin/sh, -c, 'echo run >> `+runs+`; while [ ! -e `+proceed+` ]; do sleep 0.1; done; echo 7 > "$GPUQ_OUTPUT_DIR/answer.txt"']
`)
	c.waitState(t, id, queue.StateRunning, 30*time.Second)
	restore := c.cutDatabase(t)
	if err := os.WriteFile(proceed, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The job exits at once and its success cannot be recorded for 3 s;
	// meanwhile its run message stays unacknowledged (invariant 2: a
	// worker acks only after its completion is recorded).
	time.Sleep(3 * time.Second)
	if held := queuetest.StreamMessages(t, c.n.JS, queue.StreamRun); held != 1 {
		t.Errorf("while the success could not be recorded, the run stream held %d messages, want the job's one", held)
	}
	restore()
	job := c.waitState(t, id, queue.StateSucceeded, 30*time.Second)
	queuetest.Eventually(t, 30*time.Second, "the run message to be acknowledged once the success is recorded", func() bool {
		return queuetest.StreamMessages(t, c.n.JS, queue.StreamRun) == 0
	})
	if b, _ := os.ReadFile(runs); strings.Count(string(b), "run") != 1 {
		t.Fatalf("the job must run once, ran %d times (attempt %d)", strings.Count(string(b), "run"), job.Attempt)
	}
	if a := c.attempts(t, id); len(a) != 1 || a[0].Outcome != queue.OutcomeSucceeded {
		t.Fatalf("want one attempt, succeeded, got %+v", a)
	}
	if _, err := c.store.Result(context.Background(), id); err != nil {
		t.Fatalf("the outputs of the finished attempt must be recorded: %v", err)
	}
}
