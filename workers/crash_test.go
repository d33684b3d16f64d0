package workers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/sql/pgtemp"
)

// TestNATSServerKilledMidRunLosesNothingAndCompletesEveryJobOnce SIGKILLs
// the NATS server while jobs are being dispatched, run, checkpointed and
// completed, and starts it again on its port and store directory, as a
// supervisor restarts a crashed server.
func TestNATSServerKilledMidRunLosesNothingAndCompletesEveryJobOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("a NATS server killed and restarted under 160 jobs")
	}
	t.Parallel()
	p := queuetest.StartNATSProcess(t)
	nc := p.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, dbURL := queuetest.Store(t, nil)
	runServer(t, "server", p.ServerCommand(t, gpuqBin, dbURL, "--config", testPoolConfig(t)))
	c := &cluster{n: &queuetest.NATS{URL: p.URLFor(p.Control), NC: nc, JS: js}, store: st, dbURL: dbURL, proc: p}
	c.crashMidRun(t, "NATS", func() {
		p.Kill(t)
		time.Sleep(time.Second)
		p.Start(t)
	})
}

// TestPostgreSQLCrashedMidRunLosesNothingAndCompletesEveryJobOnce crashes
// the control plane's PostgreSQL server (every process aborted, no
// checkpoint; fsync on, as gpuq dev and a deployment run it) while jobs
// are being recorded, claimed and completed, and starts it again: it
// recovers from its write-ahead log.
func TestPostgreSQLCrashedMidRunLosesNothingAndCompletesEveryJobOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("a PostgreSQL server crashed and restarted under 160 jobs")
	}
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "pg")
	pg, err := pgtemp.Start(ctx, dir, pgtemp.Options{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Destroy() }) //nolint:errcheck // test cleanup
	n := queuetest.StartNATS(t)
	dbURL := pg.URL()
	runServer(t, "server", n.ServerCommand(t, gpuqBin, dbURL, "--config", testPoolConfig(t)))
	var st *store.Store
	queuetest.Eventually(t, 60*time.Second, "gpuq server to migrate the database", func() bool {
		if st == nil {
			if st, err = store.Open(ctx, dbURL); err != nil {
				return false
			}
			t.Cleanup(func() { st.Close() })
		}
		var jobs int
		return st.DB.QueryRow(`SELECT count(*) FROM jobs`).Scan(&jobs) == nil
	})
	c := &cluster{n: n, store: st, dbURL: dbURL}
	c.crashMidRun(t, "PostgreSQL", func() {
		if err := pg.Crash(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if pg, err = pgtemp.Start(ctx, dir, pgtemp.Options{Durable: true, Port: pg.Port()}); err != nil {
			t.Fatal(err)
		}
	})
}

// crashMidRun runs 160 jobs, each saving a checkpoint, on two `gpuq worker`
// processes started as gpuq dev starts them (their default AckWait, grace
// and reconnection included) against c's `gpuq server`. 120 are submitted
// first; once 20 succeeded, crash takes what it names down and brings it
// back while the other 40 are being submitted, each submission repeated
// (under its idempotency key) until it is answered. Every job must end
// succeeded with one success recorded, and every run message be settled.
func (c *cluster) crashMidRun(t *testing.T, what string, crash func()) {
	t.Helper()
	for range 2 {
		// --data-dir only puts the attempts where the test removes them.
		c.launch(t, &local.Launcher{Executable: gpuqBin, Slots: 4, Args: []string{"--nats-url", c.natsURL(), "--data-dir", jobsDir(t)}}, testPool)
	}
	submit := func(i int) (uuid.UUID, error) {
		spec, err := queue.ParseSpec([]byte(fmt.Sprintf(`idempotency_key: crash-%d
command: [sh, -c, 'echo $GPUQ_JOB_ID > $GPUQ_CHECKPOINT_DIR/step && gpuq checkpoint save && sleep 0.2']
`, i)))
		if err != nil {
			return uuid.Nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sub, err := queue.Submit(ctx, c.n.JS, spec)
		return sub.JobID, err
	}
	var ids []uuid.UUID
	for i := range 120 {
		id, err := submit(i)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	late := make(chan []uuid.UUID, 1)
	lateErr := make(chan error, 1)
	succeeded := func() int {
		var k int
		c.store.DB.QueryRow(`SELECT count(*) FROM jobs WHERE state = 'succeeded'`).Scan(&k) //nolint:errcheck // zero on error
		return k
	}
	queuetest.Eventually(t, 120*time.Second, "some jobs to succeed", func() bool { return succeeded() >= 20 })
	go func() {
		var answered []uuid.UUID
		for i := 120; i < 160; i++ {
			id, err := submit(i)
			for deadline := time.Now().Add(90 * time.Second); err != nil && time.Now().Before(deadline); {
				time.Sleep(100 * time.Millisecond)
				id, err = submit(i)
			}
			if err != nil {
				lateErr <- fmt.Errorf("submission %d never answered: %w", i, err)
				return
			}
			answered = append(answered, id)
			time.Sleep(50 * time.Millisecond)
		}
		late <- answered
	}()
	time.Sleep(300 * time.Millisecond)
	crash()
	t.Logf("%s crashed and restarted with %d jobs succeeded", what, succeeded())
	select {
	case answered := <-late:
		ids = append(ids, answered...)
	case err := <-lateErr:
		t.Fatal(err)
	}
	for deadline := time.Now().Add(4 * time.Minute); succeeded() != len(ids); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			var recorded int
			c.store.DB.QueryRow(`SELECT count(*) FROM jobs`).Scan(&recorded) //nolint:errcheck // zero on error
			t.Fatalf("after 4m, %d of the %d jobs answered with an id succeeded; %d are recorded at all", succeeded(), len(ids), recorded)
		}
	}
	for _, id := range ids {
		var wins int
		for _, a := range c.attempts(t, id) {
			if a.Outcome == queue.OutcomeSucceeded {
				wins++
			}
		}
		var events int
		c.store.DB.QueryRow(`SELECT count(*) FROM job_events WHERE job_id = $1 AND state = 'succeeded'`, id).Scan(&events) //nolint:errcheck // zero on error
		if wins != 1 || events != 1 {
			t.Errorf("job %s: %d succeeded attempts and %d completion records, want one of each", id, wins, events)
		}
	}
	var jobs int
	c.store.DB.QueryRow(`SELECT count(*) FROM jobs`).Scan(&jobs) //nolint:errcheck // zero on error
	if jobs != len(ids) {
		t.Errorf("%d jobs recorded for %d submissions", jobs, len(ids))
	}
	queuetest.Eventually(t, 90*time.Second, "every run message to be acknowledged", func() bool {
		return queuetest.StreamMessages(t, c.n.JS, queue.StreamRun) == 0
	})
}

// A worker started before any control plane answers (a machine booted
// while the control plane restarts, or started before it) waits for one,
// as gpuq dev and the systemd unit start it, and then runs the pool's jobs.
func TestAWorkerStartedBeforeTheControlPlaneWaitsForIt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq worker and gpuq server processes")
	}
	t.Parallel()
	n := queuetest.StartNATS(t)
	st, dbURL := queuetest.Store(t, nil)
	c := &cluster{n: n, store: st, dbURL: dbURL}
	_, logPath := c.launch(t, &local.Launcher{Executable: gpuqBin, Args: []string{"--nats-url", c.natsURL(), "--data-dir", jobsDir(t)}}, testPool)
	queuetest.Eventually(t, 30*time.Second, "the worker to say it waits for a control plane", func() bool {
		out, _ := os.ReadFile(logPath)
		return strings.Contains(string(out), "waiting for a control plane to answer")
	})
	time.Sleep(5 * time.Second) // it asks again meanwhile, and goes on waiting
	runServer(t, "server", n.ServerCommand(t, gpuqBin, dbURL, "--config", testPoolConfig(t)))
	id := c.submit(t, "command: [sh, -c, 'echo ran']\n")
	c.waitState(t, id, queue.StateSucceeded, 60*time.Second)
	if out := c.logs(t, id); out != "ran\n" {
		t.Fatalf("the job's output: %q", out)
	}
}
