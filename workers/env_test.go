package workers_test

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/workers"
)

// startWorkerWithEnv launches `gpuq worker` for the test pool as gpuq dev
// does (a pool credential in its environment), with env added to its
// environment as a supervisor or a careless operator would; it returns the
// credential.
func (c *cluster) startWorkerWithEnv(t *testing.T, env []string, args ...string) string {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "worker.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := c.n.Server.Issuer.IssueWorker(testPool.Pool, testPool.Region, "")
	if err != nil {
		t.Fatal(err)
	}
	env = append(env, adapters.EnvNATSCredential+"="+cred.String())
	l := &local.Launcher{Executable: gpuqBin, Args: args, Env: env, Output: logFile}
	inst, err := l.Launch(context.Background(), testPool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		inst.Signal(syscall.SIGKILL) //nolint:errcheck // it may have exited
		inst.Wait()                  //nolint:errcheck // killed
		logFile.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("worker %s output:\n%s", inst.ID(), out)
		}
	})
	return cred.String()
}

func TestJobSeesACleanEnvironmentWithoutTheWorkersCredentials(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const secret = "worker-only-s3cret-value"
	// The database and NATS URLs come from the worker's environment, the
	// database one there by mistake; HF_HOME is passed on by name.
	cred := c.startWorkerWithEnv(t, []string{
		"GPUQ_DATABASE_URL=" + c.dbURL, "GPUQ_NATS_URL=" + c.n.Server.URL(), "GPUQ_SLOTS=1",
		"AWS_SECRET_ACCESS_KEY=" + secret, "HF_HOME=/models/hf", "CUDA_VISIBLE_DEVICES=3",
	}, "--ack-wait", "5s", "--grace", "2s", "--worker-id", "envcheck-worker-77", "--pass-env", "HF_HOME")
	id := c.submit(t, `name: env
env: {MODEL: small}
command: [/bin/sh, -c, 'echo x > "$GPUQ_CHECKPOINT_DIR/x" && gpuq checkpoint save > /dev/null && env']
`)
	c.waitState(t, id, queue.StateSucceeded, 30*time.Second)
	logs := c.logs(t, id)
	for _, leak := range []string{c.dbURL, c.n.Server.URL(), cred, adapters.EnvNATSCredential, secret, "envcheck-worker-77", "CUDA_VISIBLE_DEVICES", "GPUQ_SLOTS", "GPUQ_DATABASE_URL", "GPUQ_NATS_URL"} {
		if strings.Contains(logs, leak) {
			t.Errorf("the job's environment shows %q, which only the worker may hold:\n%s", leak, logs)
		}
	}
	// Names the job may see: the minimal base, what was passed on or asked
	// for by the spec, the job variables, and what sh itself sets.
	allowed := map[string]bool{"PATH": true, "HOME": true, "LANG": true, "HF_HOME": true, "MODEL": true,
		"GPUQ_JOB_ID": true, "GPUQ_ATTEMPT": true, "GPUQ_CHECKPOINT_DIR": true, "GPUQ_OUTPUT_DIR": true,
		"GPUQ_RESUMED": true, "GPUQ_POOL": true, "GPUQ_REGION": true, "GPUQ_CONTROL_SOCKET": true,
		"PWD": true, "SHLVL": true, "_": true, "OLDPWD": true,
		// A root worker names the job's own uid.
		"USER": os.Geteuid() == 0, "LOGNAME": os.Geteuid() == 0}
	seen := map[string]string{}
	for _, line := range strings.Split(logs, "\n") {
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		if !allowed[name] {
			t.Errorf("the job's environment has %s, which it was not given", name)
		}
		seen[name] = value
	}
	if seen["HF_HOME"] != "/models/hf" || seen["MODEL"] != "small" || seen["GPUQ_JOB_ID"] != id.String() || seen["LANG"] == "" {
		t.Errorf("want HF_HOME passed on, the spec's MODEL and the job variables, got %v", seen)
	}
	if !strings.HasPrefix(seen["PATH"], filepath.Dir(gpuqBin)+":") {
		t.Errorf("the job's PATH must start with the gpuq binary's directory, got %q", seen["PATH"])
	}
	if n := len(c.checkpoints(t, id)); n != 1 {
		t.Fatalf("gpuq checkpoint save must work through the control socket: want 1 checkpoint, got %d", n)
	}
}

func TestWorkerRefusesToPassItsOwnSettingsToJobs(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	out := runCLI(t, 1, "worker", "--pool", testPool.Pool, "--nats-url", c.n.URL, "--no-canary", "--pass-env", "HF_HOME,GPUQ_DATABASE_URL")
	if !strings.Contains(out, "worker.pass-env: GPUQ_DATABASE_URL") {
		t.Fatalf("want an error naming worker.pass-env and the variable, got %q", out)
	}
}

// A job runs as its worker's user (deploy/systemd runs workers as gpuq), so
// it could read the worker's own environment, credential included, through
// /proc/<worker>/environ, unless the worker is non-dumpable, as it makes
// itself. Run as root, the test runs the worker as nobody, as the unit runs
// it as an unprivileged user; root reads everything anyway.
func TestJobCannotReadItsWorkersEnvironmentThroughProc(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cred, err := c.n.Server.Issuer.IssueWorker(testPool.Pool, testPool.Region, "")
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "worker.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gpuqBin, "worker", "--pool", testPool.Pool, "--region", testPool.Region, "--country", testPool.Country,
		"--expect-card", testPool.Card, "--nats-url", c.n.Server.URL(), "--ack-wait", "5s", "--grace", "2s")
	cmd.Env = append(os.Environ(), adapters.EnvNATSCredential+"="+cred.String())
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if os.Geteuid() == 0 {
		nobody, err := user.Lookup("nobody")
		if err != nil {
			t.Fatalf("running as root, the test needs the nobody user to run the worker unprivileged: %v", err)
		}
		uid, _ := strconv.Atoi(nobody.Uid)
		gid, _ := strconv.Atoi(nobody.Gid)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		// nobody must reach the binary.
		if err := os.Chmod(filepath.Dir(gpuqBin), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // it may have exited
		cmd.Wait()         //nolint:errcheck // killed
		logFile.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("worker output:\n%s", out)
		}
	})
	id := c.submit(t, `name: peek
command: [/bin/sh, -c, 'cat /proc/$PPID/environ; echo "cat exit=$?"; tr "\0" "\n" < /proc/$PPID/cmdline | head -1']
`)
	c.waitState(t, id, queue.StateSucceeded, 30*time.Second)
	logs := c.logs(t, id)
	if !strings.Contains(logs, gpuqBin) {
		t.Fatalf("the job's parent must be the worker (its command line names %s), logs:\n%s", gpuqBin, logs)
	}
	if strings.Contains(logs, cred.String()) || strings.Contains(logs, adapters.EnvNATSCredential) || !strings.Contains(logs, "cat exit=1") {
		t.Fatalf("the job read its worker's environment:\n%s", logs)
	}
}

// A worker running as root (a container's default, a careless unit) told
// --run-as nobody runs each job as nobody, in an attempt directory of its own that no
// other user enters; checkpoints and outputs still work, and the checkpoint
// the next attempt restores is the job's to write.
func TestJobOfARootWorkerRunsAsNobodyInItsOwnDirectory(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root, which this test needs")
		}
		t.Skip("needs root: only a root worker runs its jobs as another user")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("the nobody user: %v", err)
	}
	c := newCluster(t)
	c.startWorker(t, 5*time.Second, 2*time.Second, "--run-as", "nobody")
	spec := `name: who
checkpoint: {paths: [state]}
command: [/bin/sh, -c, 'echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"; stat -c "home=%a:%u" "$HOME"; [ -f "$GPUQ_CHECKPOINT_DIR/state" ] && echo "restored=$(cat "$GPUQ_CHECKPOINT_DIR/state")"; echo "attempt $GPUQ_ATTEMPT" >> "$GPUQ_CHECKPOINT_DIR/state" && gpuq checkpoint save > /dev/null && echo saved; echo 1 > "$GPUQ_OUTPUT_DIR/out"; touch /root/escaped 2>/dev/null && echo "wrote /root"; [ "$GPUQ_ATTEMPT" = 1 ] && exit 3; exit 0']
retries: {max_errors: 1}
`
	id := c.submit(t, spec)
	c.waitState(t, id, queue.StateSucceeded, 60*time.Second)
	logs := c.logs(t, id)
	for _, want := range []string{"uid=" + nobody.Uid + " gid=" + nobody.Gid + " groups=" + nobody.Gid + "\n", "home=700:" + nobody.Uid, "saved", "restored=attempt 1"} {
		if !strings.Contains(logs, want) {
			t.Errorf("want %q in the job's output:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "wrote /root") {
		t.Errorf("the job wrote into /root:\n%s", logs)
	}
	if _, err := c.store.Result(context.Background(), id); err != nil {
		t.Errorf("the job's outputs must be recorded: %v", err)
	}
}

func TestRootWorkerRefusesADataDirectoryItsJobsCannotEnter(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root, which this test needs")
		}
		t.Skip("needs root: only a root worker runs its jobs as another user")
	}
	closed := filepath.Join(t.TempDir(), "closed")
	if err := os.Mkdir(closed, 0o700); err != nil { // only root enters
		t.Fatal(err)
	}
	_, err := workers.New(workers.Config{Pool: testPool.Pool, DataDir: filepath.Join(closed, "data"), JobUser: &workers.JobUser{Name: "nobody", UID: 65534, GID: 65534}},
		nil, nil, &workers.ServiceRecords{}, nil)
	if err == nil || !strings.Contains(err.Error(), "worker.data-dir: jobs run as user nobody, who cannot enter "+closed) {
		t.Fatalf("want the data directory refused, naming what blocks it, got %v", err)
	}
}
