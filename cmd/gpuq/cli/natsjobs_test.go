package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/workers"
)

// startDevNATS runs `gpuq dev -o json` in a fresh directory, as the README
// starts it, and returns its NATS URL and the NATS credential it wrote to
// its config file.
func startDevNATS(t *testing.T, bin string) (string, string) {
	t.Helper()
	// A short path: PostgreSQL's socket lives under it.
	dir, err := os.MkdirTemp("", "gpuq-dev-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	dev := exec.Command(bin, append([]string{"dev", "--data-dir", filepath.Join(dir, "data"), "-o", "json"}, demoDatabaseArgs(t)...)...)
	dev.Dir = dir
	var logs syncBuffer
	dev.Stderr = &logs
	stdout, err := dev.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dev.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
		done := make(chan struct{})
		go func() { dev.Wait(); close(done) }() //nolint:errcheck // stopping
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			dev.Process.Kill() //nolint:errcheck // stuck
			<-done
		}
		if t.Failed() {
			t.Logf("gpuq dev output:\n%s", logs.String())
		}
	})
	var conn struct {
		NATSURL string `json:"nats_url"`
	}
	if err := json.NewDecoder(stdout).Decode(&conn); err != nil || conn.NATSURL == "" {
		t.Fatalf("gpuq dev did not report its NATS URL: %v", err)
	}
	config, err := os.ReadFile(filepath.Join(dir, devConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	cred := devNATSCredential(string(config))
	if cred == "" {
		t.Fatalf("gpuq dev wrote no nats-credential to %s", devConfigFile)
	}
	return conn.NATSURL, cred
}

// clientEnv is the environment of a user's shell that knows only gpuq dev's
// NATS URL and credential: no other GPUQ_* setting, no database URL.
func clientEnv(natsURL, cred string) []string {
	env := []string{"GPUQ_NATS_URL=" + natsURL, "GPUQ_NATS_CREDENTIAL=" + cred}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GPUQ_") && !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}

func TestJobCommandsReachJobsThroughTheControlPlaneWithoutADatabaseURL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes")
	}
	t.Parallel()
	bin := buildGpuq(t)
	natsURL, cred := startDevNATS(t, bin)
	home := t.TempDir() // no .gpuq/config.yaml here
	env := clientEnv(natsURL, cred)
	gpuq := func(wantCode int, args ...string) string {
		t.Helper()
		return string(runBinary(t, bin, home, env, wantCode, args...))
	}

	// The README's first job, through the control plane.
	id := strings.TrimSpace(gpuq(0, "submit", "--name", "hello", "--", "sh", "-c", "echo hello; echo 42 > $GPUQ_OUTPUT_DIR/answer.txt"))
	if out := gpuq(0, "wait", id); !strings.Contains(out, id+" succeeded") {
		t.Fatalf("wait: %s", out)
	}
	if out := gpuq(0, "status", id); !strings.Contains(out, "state      succeeded") || !strings.Contains(out, "on pool local-cpu") {
		t.Fatalf("status: %s", out)
	}
	var decision struct {
		Chosen *struct{} `json:"chosen"`
	}
	if out := gpuq(0, "status", id, "--explain", "-o", "json"); json.Unmarshal([]byte(out), &decision) != nil || decision.Chosen == nil {
		t.Fatalf("status --explain -o json is the recomputed decision: %s", out)
	}
	if out := gpuq(0, "logs", id); out != "hello\n" {
		t.Fatalf("logs: %q", out)
	}
	if out := gpuq(0, "logs", "-f", id); out != "hello\n" {
		t.Fatalf("logs -f of a finished job ends: %q", out)
	}
	dir := filepath.Join(t.TempDir(), "out")
	gpuq(0, "results", id, "--dir", dir)
	if b, err := os.ReadFile(filepath.Join(dir, "answer.txt")); err != nil || string(b) != "42\n" {
		t.Fatalf("results: %q %v", b, err)
	}
	if out := gpuq(0, "ls"); !strings.Contains(out, id) {
		t.Fatalf("ls: %s", out)
	}
	gpuq(0, "nodes")

	// Another project's job is not found unless the caller acts in it.
	other := strings.TrimSpace(gpuq(0, "submit", "--project", "teamb", "--name", "long", "--", "sleep", "60"))
	gpuq(ExitNotFound, "status", other)
	gpuq(ExitNotFound, "cancel", other)
	if out := gpuq(0, "ls", "-o", "json"); strings.Contains(out, other) {
		t.Fatalf("ls in the default project lists teamb's job: %s", out)
	}
	gpuq(0, "status", other, "--project", "teamb")
	// A config naming both projects acts in both.
	config := writeFile(t, "gpuq.yaml", "projects: [default, teamb]\n")
	if out := gpuq(0, "ls", "--config", config); !strings.Contains(out, id) || !strings.Contains(out, other) {
		t.Fatalf("ls over the configured projects lists both jobs: %s", out)
	}
	if out := gpuq(0, "cancel", other, "--config", config); !strings.Contains(out, other+" cancelled") {
		t.Fatalf("cancel: %s", out)
	}
	gpuq(ExitCancelled, "wait", other, "--config", config)
}

func TestWaitReturnsWhenTheJobsTerminalEventIsLost(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	s, dbURL := queuetest.Store(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	startClientService(ctx, t, n, s)
	id, _ := recordSleeper(ctx, t, s)
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, _, err := runCLI(t, "wait", id.String(), "--nats-url", n.URL)
		done <- result{out, err}
	}()
	time.Sleep(time.Second)
	// The job is cancelled through a handle that announces nothing: its
	// terminal event never reaches the event stream.
	silent, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if err := silent.Cancel(ctx, id, "cancelled behind the stream's back"); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		var exit *ExitError
		if !errors.As(r.err, &exit) || exit.Code != ExitCancelled || !strings.Contains(r.out, id.String()+" cancelled") {
			t.Fatalf("wait must return the cancelled job, got %q %v", r.out, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("gpuq wait still waiting 20 s after the job was cancelled: a lost event held it")
	}
}

// runBinary runs the gpuq binary bin in dir with exactly env, fails t
// unless it exits with wantCode, and returns its stdout then its stderr.
func runBinary(t *testing.T, bin, dir string, env []string, wantCode int, args ...string) []byte {
	t.Helper()
	return runBinaryInput(t, bin, dir, env, "", wantCode, args...)
}

// runBinaryInput is runBinary with stdin as the command's standard input.
func runBinaryInput(t *testing.T, bin, dir string, env []string, stdin string, wantCode int, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != wantCode {
		t.Fatalf("gpuq %v: exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, wantCode, out.String(), errOut.String())
	}
	return append(out.Bytes(), errOut.Bytes()...)
}

// A control plane that took a wait request and died never answers it: the
// waiter asks again when its call times out, and another control plane
// answers from the same point. The call's bound is shortened from its 30 s
// so that the test does not wait for it.
func TestWaitOverNATSOutlivesAControlPlaneThatDiedHoldingIt(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	id, spec := recordSleeper(ctx, t, s)
	if err := s.Cancel(ctx, id, "cancelled before the wait"); err != nil {
		t.Fatal(err)
	}
	// The first control plane takes the wait and is gone.
	took := make(chan struct{})
	dead, err := n.NC.SubscribeSync(queue.ClientServiceSubject(spec.Project, queue.ClientOpWait))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if _, err := dead.NextMsg(time.Minute); err == nil {
			dead.Unsubscribe() //nolint:errcheck // gone either way
			close(took)
		}
	}()
	waited := make(chan error, 1)
	var states []queue.JobState
	jobs := &natsJobs{nc: n.NC, projects: []string{spec.Project}, owner: map[uuid.UUID]string{}, timeout: time.Second}
	go func() {
		waited <- jobs.Events(ctx, id, func(ev queue.Event) bool { states = append(states, ev.State); return true })
	}()
	<-took
	startClientService(ctx, t, n, s)
	select {
	case err := <-waited:
		if err != nil || len(states) != 1 || states[0] != queue.StateCancelled {
			t.Fatalf("the wait must end with the job's cancellation from the control plane that answered, got %v, %v", states, err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the wait never ended")
	}
}

// A wait and a followed log over NATS outlive a restart of the control
// plane: while no server answers, they ask again, and the restarted one
// answers from the point they had reached.
func TestWaitOverNATSOutlivesARestartOfTheControlPlane(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	id, _ := recordSleeper(ctx, t, s)
	first, stop := context.WithCancel(ctx)
	startClientService(first, t, n, s)
	waited := make(chan error, 1)
	var mu sync.Mutex
	var states []queue.JobState
	// Waits are held for a second, not 20 s, so that the one held when
	// the control plane stops is answered during the outage.
	jobs := &natsJobs{nc: n.NC, projects: []string{queue.DefaultProject}, owner: map[uuid.UUID]string{}, poll: time.Second}
	go func() {
		waited <- jobs.Events(ctx, id, func(ev queue.Event) bool {
			mu.Lock()
			defer mu.Unlock()
			states = append(states, ev.State)
			return true
		})
	}()
	followed := make(chan error, 1)
	go func() {
		followed <- jobs.Logs(ctx, id, logRead{Follow: true}, func(queue.LogChunk) error { return nil })
	}()
	queuetest.Eventually(t, 30*time.Second, "the wait's first answer", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(states) == 1
	})
	stop()
	// Longer than a call waits for a responder (noResponderWait).
	time.Sleep(noResponderWait + 2*time.Second)
	select {
	case err := <-waited:
		t.Fatalf("the wait ended while no control plane ran: %v", err)
	case err := <-followed:
		t.Fatalf("the followed log ended while no control plane ran: %v", err)
	default:
	}
	startClientService(ctx, t, n, s)
	if err := s.Cancel(ctx, id, "cancelled after the restart"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		mu.Lock()
		defer mu.Unlock()
		if err != nil || states[len(states)-1] != queue.StateCancelled {
			t.Fatalf("the wait must end with the cancellation the restarted control plane saw, got %v, %v", states, err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the wait never ended")
	}
	select {
	case err := <-followed:
		if err != nil {
			t.Fatalf("the followed log must end with the job: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the followed log never ended")
	}
}

// recordSleeper records a pending job that would sleep a minute, as a
// submission the scheduler took.
func recordSleeper(ctx context.Context, t *testing.T, s *store.Store) (uuid.UUID, *queue.Spec) {
	t.Helper()
	id := uuid.New()
	spec, err := queue.ParseSpec([]byte("command: [sleep, '60']"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordJobs(ctx, []queue.NewJob{{ID: id, Spec: spec}}); err != nil {
		t.Fatal(err)
	}
	return id, spec
}

// startClientService serves the client service until ctx ends, as every
// gpuq server runs it, with default settings.
func startClientService(ctx context.Context, t *testing.T, n *queuetest.NATS, s *store.Store) {
	t.Helper()
	if _, err := (&control.ClientService{NATS: n.NC, Store: s, JS: n.JS, Archives: &workers.ObjectStore{JS: n.JS}}).Start(ctx); err != nil {
		t.Fatal(err)
	}
}
