package workers_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/workers"
)

// needRoot skips a test of what only a root worker does, except on CI,
// which runs as root.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root, which this test needs")
		}
		t.Skip("needs root: only a root worker runs its jobs as other users")
	}
}

// Two jobs running at once on one root worker each run as a uid of their
// own: neither reads the other's attempt directory nor signals, kills or
// reads the environment of the other's process, and neither lists the
// worker's data directory. The victim job then still saves its checkpoint
// through its control socket.
func TestJobsOfOneWorkerRunAsUIDsOfTheirOwnAndCannotReachEachOther(t *testing.T) {
	t.Parallel()
	needRoot(t)
	c := newCluster(t)
	shared := jobWritable(t)
	c.startWorker(t, 5*time.Second, 2*time.Second, "--slots", "2", "--job-uids", "70900-70903")
	victim := c.submit(t, fmt.Sprintf(`name: victim
checkpoint: {paths: [secret]}
command: [/bin/sh, -c, 'S=%[1]s; echo "uid=$(id -u) gid=$(id -g)"; stat -c "home=%%a:%%u" "$HOME"; echo s3cret > "$GPUQ_CHECKPOINT_DIR/secret"; echo "$$ $GPUQ_CHECKPOINT_DIR" > $S/b.tmp && mv $S/b.tmp $S/b; i=0; while [ ! -f $S/a-done ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; echo "victim alive"; gpuq checkpoint save > /dev/null && echo saved']
`, shared))
	attacker := c.submit(t, fmt.Sprintf(`name: attacker
command: [/bin/sh, -c, 'S=%[1]s; i=0; while [ ! -f $S/b ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; read pid dir < $S/b; echo "uid=$(id -u) gid=$(id -g) victim=$pid"; cat "$dir/secret" && echo "READ FILE"; ls "$dir" && echo "LISTED DIR"; ls "$(dirname "$HOME")" && echo "LISTED DATA DIR"; grep -q GPUQ /proc/$pid/environ && echo "READ ENV"; kill -0 $pid && echo "SIGNALLED"; kill -9 $pid && echo "KILLED"; touch $S/a-done']
`, shared))
	c.waitState(t, attacker, queue.StateSucceeded, 60*time.Second)
	c.waitState(t, victim, queue.StateSucceeded, 60*time.Second)
	vlogs, alogs := c.logs(t, victim), c.logs(t, attacker)
	uid := regexp.MustCompile(`uid=(\d+) gid=(\d+)`)
	vm, am := uid.FindStringSubmatch(vlogs), uid.FindStringSubmatch(alogs)
	if vm == nil || am == nil {
		t.Fatalf("both jobs must print their ids:\n%s\n%s", vlogs, alogs)
	}
	for _, m := range [][]string{vm, am} {
		n, _ := strconv.Atoi(m[1])
		if n < 70900 || n > 70903 || m[2] != m[1] {
			t.Errorf("want each job's uid and gid the same, from --job-uids 70900-70903, got uid %s gid %s", m[1], m[2])
		}
	}
	if vm[1] == am[1] {
		t.Fatalf("two jobs running at once share uid %s", vm[1])
	}
	for _, harm := range []string{"s3cret", "READ FILE", "LISTED DIR", "LISTED DATA DIR", "READ ENV", "SIGNALLED", "KILLED"} {
		if strings.Contains(alogs, harm) {
			t.Errorf("one job reached another (%s):\n%s", harm, alogs)
		}
	}
	for _, want := range []string{"home=700:" + vm[1], "victim alive", "saved"} {
		if !strings.Contains(vlogs, want) {
			t.Errorf("want %q in the victim's output:\n%s", want, vlogs)
		}
	}
	if n := len(c.checkpoints(t, victim)); n != 1 {
		t.Fatalf("the victim's checkpoint save must work under its uid: want 1 checkpoint, got %d", n)
	}
}

// A job left running by an attempt (it left its process group) is killed
// when the attempt ends: the next job given the same uid never meets it.
func TestProcessAJobLeftBehindIsKilledBeforeItsUIDServesAnotherJob(t *testing.T) {
	t.Parallel()
	needRoot(t)
	c := newCluster(t)
	shared := jobWritable(t)
	c.startWorker(t, 5*time.Second, 2*time.Second, "--job-uids", "70910-70910")
	first := c.submit(t, fmt.Sprintf(`name: leaver
command: [/bin/sh, -c, 'setsid sh -c "echo \$\$ > %[1]s/left; exec sleep 300" < /dev/null > /dev/null 2>&1 & sleep 0.5; echo "uid=$(id -u)"']
`, shared))
	c.waitState(t, first, queue.StateSucceeded, 30*time.Second)
	raw, err := os.ReadFile(filepath.Join(shared, "left"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, 10*time.Second, "the process the job left behind to be killed", func() bool {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		return err != nil || strings.Contains(string(status), "State:\tZ")
	})
	second := c.submit(t, `name: next
command: [/bin/sh, -c, 'echo "uid=$(id -u)"']
`)
	c.waitState(t, second, queue.StateSucceeded, 30*time.Second)
	if logs := c.logs(t, second); !strings.Contains(logs, "uid=70910") {
		t.Fatalf("want the next job on uid 70910 again:\n%s", logs)
	}
}

// readmeRecipe is the README's Python SIGTERM recipe, with json in place of
// torch and a short sleep in place of an epoch.
const readmeRecipe = `import getpass, json, os, signal, subprocess, sys, time
ckpt = os.path.join(os.environ["GPUQ_CHECKPOINT_DIR"], "model.json")
state = json.load(open(ckpt)) if os.environ.get("GPUQ_RESUMED") == "1" else {"epoch": 0, "model": None}
print(f"start attempt={os.environ['GPUQ_ATTEMPT']} epoch={state['epoch']} uid={os.getuid()} user={getpass.getuser()}", flush=True)
def save(*_):
    with open(ckpt, "w") as f:
        json.dump(state, f)
    subprocess.run(["gpuq", "checkpoint", "save"], check=True, stdout=subprocess.DEVNULL)
signal.signal(signal.SIGTERM, lambda *a: (save(), print(f"saved on SIGTERM at epoch {state['epoch']}", flush=True), sys.exit(0)))
for state["epoch"] in range(state["epoch"], 40):
    time.sleep(0.2)
    save()
print("done", flush=True)`

// The README's Python recipe (save on SIGTERM, resume from
// GPUQ_CHECKPOINT_DIR) still resumes when its worker is preempted, with the
// job under a uid of its own when the worker runs as root.
func TestReadmePythonSIGTERMRecipeResumesAfterAPreemption(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3")
	}
	c := newCluster(t)
	a := c.startWorker(t, 30*time.Second, 5*time.Second)
	id := c.submit(t, "name: recipe\ncommand: [/usr/bin/python3, -c, "+strconv.Quote(readmeRecipe)+"]\n")
	c.waitState(t, id, queue.StateRunning, 30*time.Second)
	waitCheckpoint(t, c, id, 3)
	c.startWorker(t, 30*time.Second, 5*time.Second)
	if err := a.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	c.waitState(t, id, queue.StateSucceeded, 90*time.Second)
	logs := c.logs(t, id)
	attempts := c.attempts(t, id)
	if len(attempts) != 2 || attempts[0].Outcome != queue.OutcomePreempted {
		t.Fatalf("want attempt 1 preempted and attempt 2 to finish, got %d attempts:\n%s", len(attempts), logs)
	}
	m := regexp.MustCompile(`saved on SIGTERM at epoch (\d+)`).FindStringSubmatch(logs)
	if m == nil || m[1] == "0" {
		t.Fatalf("attempt 1 must save its final checkpoint on SIGTERM:\n%s", logs)
	}
	if !strings.Contains(logs, "start attempt=2 epoch="+m[1]+" ") || !strings.Contains(logs, "done") {
		t.Fatalf("attempt 2 must resume from epoch %s:\n%s", m[1], logs)
	}
	if os.Geteuid() == 0 {
		for _, line := range regexp.MustCompile(`uid=(\d+) user=(\S+)`).FindAllStringSubmatch(logs, -1) {
			n, _ := strconv.Atoi(line[1])
			if n < int(workers.DefaultJobUIDs.First) || n > int(workers.DefaultJobUIDs.Last) || line[2] != "gpuq-job-"+line[1] {
				t.Errorf("want the job on a uid of %s named gpuq-job-<uid>, got %s", workers.DefaultJobUIDs, line[0])
			}
		}
	}
}

func TestWorkerRefusesJobUIDsThatCannotServeItsSlotsSafely(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ uids, want string }{
		{"0-100", "worker.job-uids: 0-100 includes uid 0 (root)"},
		{"70010-70000", "worker.job-uids: 70010-70000 ends before it starts"},
		{"70000", "worker.job-uids: want FIRST-LAST"},
		{"a-b", "worker.job-uids: want FIRST-LAST of numeric uids"},
	} {
		out := runCLI(t, 1, "worker", "--pool", testPool.Pool, "--nats-url", "nats://127.0.0.1:1", "--no-canary", "--job-uids", tc.uids)
		if os.Geteuid() != 0 {
			tc.want = "worker.job-uids: only a worker running as root"
		}
		if !strings.Contains(out, tc.want) {
			t.Errorf("--job-uids %s: want %q, got %q", tc.uids, tc.want, out)
		}
	}
	needRoot(t)
	out := runCLI(t, 1, "worker", "--pool", testPool.Pool, "--nats-url", "nats://127.0.0.1:1", "--no-canary", "--job-uids", "70000-70001", "--run-as", "nobody")
	if !strings.Contains(out, "worker.job-uids: --run-as nobody runs every job as one user") {
		t.Errorf("want --job-uids and --run-as refused together, got %q", out)
	}
	for _, tc := range []struct {
		uids  workers.UIDRange
		slots int
		want  string
	}{
		{workers.UIDRange{First: 70000, Last: 70001}, 3, "worker.job-uids: 70000-70001 holds 2 uids, fewer than worker.slots 3"},
		{workers.UIDRange{First: 65530, Last: 65535}, 1, "worker.job-uids: 65530-65535 includes uid 65534, user nobody of this machine"},
	} {
		_, err := workers.New(workers.Config{Pool: testPool.Pool, Slots: tc.slots, DataDir: jobsDir(t), JobUIDs: &tc.uids},
			nil, nil, &workers.ServiceRecords{}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want %q, got %v", tc.want, err)
		}
	}
}

// A root worker whose credential file its jobs could read does not start.
func TestRootWorkerRefusesACredentialFileItsJobsCouldRead(t *testing.T) {
	t.Parallel()
	needRoot(t)
	creds := filepath.Join(t.TempDir(), "worker.creds")
	if err := os.WriteFile(creds, []byte("not read before the check"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{nil, {"--run-as", "nobody"}} {
		out := runCLI(t, 1, append([]string{"worker", "--pool", testPool.Pool, "--nats-url", "nats://127.0.0.1:1", "--no-canary", "--nats-creds", creds}, args...)...)
		if !strings.Contains(out, "worker.nats-creds: "+creds+" holds the worker's credential and its jobs, running as other users, may read it") {
			t.Errorf("%v: want the readable credential file refused, got %q", args, out)
		}
	}
}
