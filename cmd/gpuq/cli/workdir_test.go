package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

// trainPy reads a data file beside it, relative to where it runs, says
// where that is and what it finds there, and leaves a result.
const trainPy = `import os
print("in workdir:", os.getcwd() == os.environ["GPUQ_WORKDIR"])
print("data:", open("data/in.txt").read().strip())
print("files:", sorted(os.listdir(".")))
with open(os.path.join(os.environ["GPUQ_OUTPUT_DIR"], "result.txt"), "w") as f:
    f.write("trained on " + open("data/in.txt").read())
`

// A researcher's project directory shipped with its job, as gpuq dev's
// user ships it: --workdir on the command line (over HTTP, from gpuq dev's
// directory, or a project directory below it) or workdir: in a spec file,
// relative to the file. The command
// finds its files where it runs; gpuq dev's credentials, version control,
// caches and what .gpuqignore names stay behind; a symlink out of the directory is named and left
// out. Over NATS alone nothing can be uploaded, and a job naming a
// directory never uploaded fails saying so without running.
func TestAJobRunsInTheWorkingDirectoryItsSubmitterUploaded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes")
	}
	t.Parallel()
	bin := buildGpuq(t)
	dir := t.TempDir()
	natsEnv, httpEnv := devClients(t, bin, dir)
	overHTTP := func(wantCode int, args ...string) string {
		t.Helper()
		return string(runBinary(t, bin, dir, httpEnv, wantCode, args...))
	}

	proj := filepath.Join(dir, "proj")
	for name, content := range map[string]string{
		"train.py": trainPy, "data/in.txt": "imagenet-mini\n", ".gpuq/token": "not-for-the-job\n",
		".git/HEAD": "ref: refs/heads/main\n", "__pycache__/train.cpython.pyc": "bytecode",
		"job.yaml":    "name: from-file\ncommand: [python3, train.py]\nworkdir: .\n",
		".gpuqignore": "# stays here\nruns/\n", "runs/1/model.ckpt": "weights",
	} {
		p := filepath.Join(proj, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(proj, "passwd")); err != nil {
		t.Fatal(err)
	}

	// From the project directory, below gpuq dev's: its config is found
	// in the parent, as the Python client finds it.
	out := string(runBinary(t, bin, proj, httpEnv, 0, "submit", "--workdir", ".", "--wait", "--", "python3", "train.py"))
	if !strings.Contains(out, "gpuq: workdir "+proj+": left out passwd: a symlink to /etc/passwd, outside the directory") {
		t.Fatalf("submit --workdir: want the symlink out of the directory named, got %s", out)
	}
	id := strings.Fields(out)[0]
	if !strings.Contains(out, id+" succeeded") {
		t.Fatalf("submit --workdir --wait: %s", out)
	}
	logs := overHTTP(0, "logs", id)
	for _, want := range []string{"in workdir: True", "data: imagenet-mini", "files: ['.gpuqignore', 'data', 'job.yaml', 'train.py']"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("logs: want %q, got\n%s", want, logs)
		}
	}
	results := filepath.Join(t.TempDir(), "out")
	overHTTP(0, "results", id, "--dir", results)
	if b, err := os.ReadFile(filepath.Join(results, "result.txt")); err != nil || string(b) != "trained on imagenet-mini\n" {
		t.Fatalf("results: %q, %v", b, err)
	}
	var st control.JobStatus
	if err := json.Unmarshal([]byte(overHTTP(0, "status", id, "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if _, ok := queue.WorkdirDigest(st.Job.Spec.Workdir); !ok {
		t.Fatalf("the job's spec names no uploaded directory: %q", st.Job.Spec.Workdir)
	}
	if out := overHTTP(0, "status", id); !strings.Contains(out, "\nworkdir    "+st.Job.Spec.Workdir+"\n") {
		t.Fatalf("status: want the job's workdir, got %s", out)
	}

	// From a spec file elsewhere: its workdir is relative to the file.
	if out := overHTTP(0, "submit", "proj/job.yaml", "--wait"); !strings.Contains(out, " succeeded") {
		t.Fatalf("submit proj/job.yaml: %s", out)
	}

	// The same files give the same spec, so an idempotency key names the
	// same job; changed code under the same key is a conflict.
	first := strings.TrimSpace(overHTTP(0, "submit", "--workdir", "proj", "--idempotency-key", "train-v1", "--", "python3", "train.py"))
	again := strings.TrimSpace(overHTTP(0, "submit", "--workdir", "proj", "--idempotency-key", "train-v1", "--", "python3", "train.py"))
	if lastLine(first) != lastLine(again) {
		t.Fatalf("resubmitting unchanged files named job %s, then %s", lastLine(first), lastLine(again))
	}
	if err := os.WriteFile(filepath.Join(proj, "train.py"), []byte(trainPy+"print('changed')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := overHTTP(ExitGeneral, "submit", "--workdir", "proj", "--idempotency-key", "train-v1", "--", "python3", "train.py"); !strings.Contains(out, "already used with a different spec") {
		t.Fatalf("changed code under the same key: %s", out)
	}

	// Over NATS alone: nothing to upload through, said at once.
	home := t.TempDir()
	if err := os.Symlink(proj, filepath.Join(home, "proj")); err != nil {
		t.Fatal(err)
	}
	if out := string(runBinary(t, bin, home, natsEnv, ExitGeneral, "submit", "--workdir", "proj", "--", "python3", "train.py")); !strings.Contains(out, "a working directory is uploaded through the HTTP API") {
		t.Fatalf("--workdir over NATS: %s", out)
	}
	// A directory never uploaded: over HTTP refused, over NATS the job
	// fails without running.
	missing := "sha256:" + strings.Repeat("0", 64)
	spec := filepath.Join(home, "missing.json")
	if err := os.WriteFile(spec, []byte(`{"command": ["python3", "train.py"], "workdir": "`+missing+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := overHTTP(ExitGeneral, "submit", spec); !strings.Contains(out, "spec.workdir: "+missing+" is not uploaded for project default") {
		t.Fatalf("submitting a directory never uploaded over HTTP: %s", out)
	}
	lost := lastLine(strings.TrimSpace(string(runBinary(t, bin, home, natsEnv, 0, "submit", spec))))
	if out := string(runBinary(t, bin, home, natsEnv, ExitFailed, "wait", lost)); !strings.Contains(out, "fetching its working directory "+missing+": ") ||
		!strings.Contains(out, "was never uploaded for project default, or was deleted storage.workdir_retention after its last upload; the job was not run") {
		t.Fatalf("a job naming a directory never uploaded: %s", out)
	}
	// Retrying it cannot help until its directory is uploaded: refused,
	// over NATS and over HTTP, saying how to bring it back.
	for _, retry := range []func() string{
		func() string { return string(runBinary(t, bin, home, natsEnv, ExitRejected, "retry", lost)) },
		func() string { return overHTTP(ExitRejected, "retry", lost) },
	} {
		if out := retry(); !strings.Contains(out, "its working directory "+missing+" is not stored for project default") ||
			!strings.Contains(out, "gpuq workdir upload DIR --project default") {
			t.Fatalf("retry of a job whose directory is not stored: %s", out)
		}
	}

	// Uploaded on its own, a directory is named by a spec submitted
	// anywhere, over NATS too.
	// (Its stdout, then its stderr naming the symlink it left out.)
	digest := strings.Fields(overHTTP(0, "workdir", "upload", "proj"))[0]
	if _, ok := queue.WorkdirDigest(digest); !ok {
		t.Fatalf("workdir upload: want sha256:<digest>, got %q", digest)
	}
	var answer struct {
		Workdir, Project string
		Bytes            int64
	}
	if err := json.NewDecoder(strings.NewReader(overHTTP(0, "workdir", "upload", "proj", "-o", "json"))).Decode(&answer); err != nil ||
		answer.Workdir != digest || answer.Project != "default" || answer.Bytes == 0 {
		t.Fatalf("workdir upload -o json: %+v, %v", answer, err)
	}
	named := filepath.Join(home, "named.json")
	if err := os.WriteFile(named, []byte(`{"command": ["python3", "train.py"], "workdir": "`+digest+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := string(runBinary(t, bin, home, natsEnv, 0, "submit", named, "--wait")); !strings.Contains(out, " succeeded") {
		t.Fatalf("a spec naming an uploaded directory, over NATS: %s", out)
	}
}

// lastLine is the last line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// The README's training example, run as the README runs it: its code and
// config go with the job, it checkpoints every epoch, and when the worker
// running it is SIGKILLed the next attempt resumes at the epoch the last
// checkpoint holds.
func TestTheTrainingExampleShipsItsCodeAndResumesWhereItsKilledWorkerLeftIt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes")
	}
	t.Parallel()
	bin := buildGpuq(t)
	dir := t.TempDir()
	_, httpEnv := devClients(t, bin, dir)
	run := func(wantCode int, args ...string) string {
		t.Helper()
		return string(runBinary(t, bin, dir, httpEnv, wantCode, args...))
	}
	example, err := filepath.Abs(filepath.Join("..", "..", "..", "examples", "train", "job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	id := lastLine(run(0, "submit", example))
	var st control.JobStatus
	for deadline := time.Now().Add(time.Minute); st.LastCheckpoint == nil || st.LastCheckpoint.Seq < 3; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no third checkpoint within a minute: %+v\n%s", st.Job, run(0, "logs", id))
		}
		if err := json.Unmarshal([]byte(run(0, "status", id, "-o", "json")), &st); err != nil {
			t.Fatal(err)
		}
	}
	worker := st.Attempts[len(st.Attempts)-1].PID
	if err := syscall.Kill(worker, syscall.SIGKILL); err != nil {
		t.Fatalf("killing the worker (pid %d): %v", worker, err)
	}
	if out := run(0, "wait", id); !strings.Contains(out, id+" succeeded") {
		t.Fatalf("wait: %s", out)
	}
	logs := run(0, "logs", id)
	m := regexp.MustCompile(`attempt (\d+) starts at epoch (\d+) \(lr 0.01\)`).FindAllStringSubmatch(logs, -1)
	if len(m) < 2 || m[0][2] != "0" {
		t.Fatalf("want a first attempt from epoch 0 and a later one, got\n%s", logs)
	}
	if resumed, _ := strconv.Atoi(m[len(m)-1][2]); resumed < 3 {
		t.Fatalf("the attempt after the kill started at epoch %d, want at least the third checkpoint's 3:\n%s", resumed, logs)
	}
	out := filepath.Join(t.TempDir(), "out")
	run(0, "results", id, "--dir", out)
	var metrics struct{ Epoch int }
	if b, err := os.ReadFile(filepath.Join(out, "metrics.json")); err != nil || json.Unmarshal(b, &metrics) != nil || metrics.Epoch != 20 {
		t.Fatalf("results: %q, %v", b, err)
	}
}
