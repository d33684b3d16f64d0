package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpuq/gpuq/queue/control"
)

// retryJob fails until its third run, saving a checkpoint that counts its
// runs before it decides; it leaves the count as its output. A failing run
// lasts a second, so that a wait started at once finds it running.
const retryJob = `n=$(cat "$GPUQ_CHECKPOINT_DIR/n" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$GPUQ_CHECKPOINT_DIR/n"
gpuq checkpoint save >/dev/null; echo "run $n resumed=$GPUQ_RESUMED"
test $n -ge 3 || { sleep 1; exit 3; }
echo $n > "$GPUQ_OUTPUT_DIR/runs"`

// retriedLine is the line gpuq retry prints for a job: placed again, or
// already claimed (even finished) by one of gpuq dev's idle workers when
// the answer is read.
func retriedLine(id string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^` + id + ` (placed|running|failed|succeeded) on pool local-cpu(-spot)?$`)
}

// A failed job retried as a user of gpuq dev retries it: over HTTP (the
// config file gpuq dev writes, from its directory) and over NATS (only the
// NATS credential it writes). Each retry resumes from the job's latest
// checkpoint, gpuq wait follows the job past the end it was retried from,
// and a job that cannot be retried is named with why and left as it was.
func TestARetriedJobResumesFromItsCheckpointAndIsWaitedForPastTheEndItWasRetriedFrom(t *testing.T) {
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
	home := t.TempDir()
	overNATS := func(wantCode int, args ...string) string {
		t.Helper()
		return string(runBinary(t, bin, home, natsEnv, wantCode, args...))
	}

	id := strings.TrimSpace(overHTTP(0, "submit", "--name", "flaky", "--max-errors", "0", "--label", "sweep=retry", "--", "sh", "-c", retryJob))
	if out := overHTTP(ExitFailed, "wait", id); !strings.Contains(out, id+" failed") ||
		!strings.Contains(out, "failed: exited with status 3 (gpuq retry "+id+" runs it again from its latest checkpoint)") {
		t.Fatalf("wait: want the failure and how to run the job again, got %s", out)
	}
	if out := overHTTP(0, "status", id); !strings.Contains(out, "\nretry      gpuq retry "+id+" resumes it from checkpoint 1\n") {
		t.Fatalf("status of the failed job: want how to retry it, got %s", out)
	}
	if out := overHTTP(0, "retry", id); !retriedLine(id).MatchString(out) {
		t.Fatalf("retry: want the job placed again, got %s", out)
	}
	// The wait follows the second run to its end, past the first run's.
	if out := overHTTP(ExitFailed, "wait", id); !strings.Contains(out, id+" failed") {
		t.Fatalf("wait after the retry: want its second run's failure, got %s", out)
	}
	if out := overHTTP(0, "status", id); !strings.Contains(out, "retried by user (ended failed: exited with status 3)") {
		t.Fatalf("status after the retry: want the retry on the trail, got %s", out)
	}
	var st control.JobStatus
	if err := json.Unmarshal([]byte(overHTTP(0, "status", id, "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Job.Attempt != 2 || st.Job.Errors != 1 || st.Job.PlacementVersion != 2 || len(st.Attempts) != 2 {
		t.Fatalf("after one retry: want attempt 2, 1 error (counted again from 0), placement 2, two attempts; got %+v", st.Job)
	}
	// Over NATS, by label, waited for: the third run succeeds.
	if out := overNATS(0, "retry", "--label", "sweep=retry", "--wait"); !retriedLine(id).MatchString(out) || !strings.Contains(out, id+" succeeded") {
		t.Fatalf("retry --label --wait: %s", out)
	}
	logs := overNATS(0, "logs", id)
	for _, want := range []string{"run 1 resumed=0", "run 2 resumed=1", "run 3 resumed=1"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("logs: want %q (each retry resumes from the latest checkpoint), got\n%s", want, logs)
		}
	}
	// Its last line, and its first attempt's, over either path; -f from
	// the last line of a finished job prints it and ends.
	for _, over := range []func(int, ...string) string{overNATS, overHTTP} {
		if got := over(0, "logs", "--tail", "1", id); got != "run 3 resumed=1\n" {
			t.Fatalf("logs --tail 1: want the last run's line alone, got %q", got)
		}
		if got := over(0, "logs", "--tail", "1", "--attempt", "1", id); got != "run 1 resumed=0\n" {
			t.Fatalf("logs --tail 1 --attempt 1: want the first run's line alone, got %q", got)
		}
		if got := over(0, "logs", "-f", "--tail", "2", id); got != "run 2 resumed=1\nrun 3 resumed=1\ngpuq: attempt 3's output follows\n" { // stdout, then stderr
			t.Fatalf("logs -f --tail 2: want the last two runs' lines, got %q", got)
		}
	}
	if got := overHTTP(1, "logs", "--tail", "-2", id); !strings.Contains(got, "--tail: must be 1–10000 lines") {
		t.Fatalf("logs --tail -2: %s", got)
	}
	out := filepath.Join(home, "out")
	overNATS(0, "results", id, "--dir", out)
	if b, err := os.ReadFile(filepath.Join(out, "runs")); err != nil || string(b) != "3\n" {
		t.Fatalf("results: runs = %q, %v", b, err)
	}

	// Retried fresh: its checkpoints are dropped and it starts again from
	// its first run's count.
	again := strings.TrimSpace(overNATS(0, "submit", "--name", "flaky", "--max-errors", "0", "--", "sh", "-c", retryJob))
	overNATS(ExitFailed, "wait", again)
	if got := overNATS(0, "retry", "--fresh", again); !retriedLine(again).MatchString(got) {
		t.Fatalf("retry --fresh: %s", got)
	}
	overHTTP(ExitFailed, "wait", again)
	if got := overHTTP(0, "status", again); !strings.Contains(got, "retried by user from the start, its checkpoints dropped (ended failed") {
		t.Fatalf("status after retry --fresh: %s", got)
	}
	if logs := overHTTP(0, "logs", again); strings.Count(logs, "run 1 resumed=0") != 2 || strings.Contains(logs, "run 2") {
		t.Fatalf("logs after retry --fresh: want the first run twice, got\n%s", logs)
	}

	if got := overNATS(0, "status", id); strings.Contains(got, "gpuq retry") {
		t.Fatalf("status of a succeeded job must not offer a retry: %s", got)
	}

	// Refused, changing nothing.
	if got := overNATS(1, "retry", id); !strings.Contains(got, "cannot be retried: it succeeded, and a job succeeds once") {
		t.Fatalf("retry of a succeeded job over NATS: %s", got)
	}
	if got := overHTTP(1, "retry", id); !strings.Contains(got, "cannot be retried: it succeeded") {
		t.Fatalf("retry of a succeeded job over HTTP: %s", got)
	}
	if got := overHTTP(ExitNotFound, "retry", "01a24ce0-af21-7cae-8e7a-8265545c6400"); !strings.Contains(got, "not found") {
		t.Fatalf("retry of an unknown job: %s", got)
	}
	nowhere := strings.TrimSpace(overNATS(ExitRejected, "submit", "--residency", "CH", "--", "true"))
	nowhere = strings.Fields(nowhere)[0]
	for _, retry := range []func(int, ...string) string{overHTTP, overNATS} {
		if got := retry(ExitRejected, "retry", nowhere); !strings.Contains(got, "cannot be placed now, so it was not retried: no placement") {
			t.Fatalf("retry of a job no offer takes: %s", got)
		}
	}
	if err := json.Unmarshal([]byte(overHTTP(0, "status", nowhere, "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Job.State != "rejected" || len(st.History) != 2 {
		t.Fatalf("a refused retry must change nothing: %+v, trail %+v", st.Job, st.History)
	}
}

// devClients runs gpuq dev in dir, on any free HTTP port (tests run beside
// other gpuq devs), and returns the environments of its two kinds of
// client: one holding only the NATS credential gpuq dev wrote, and one with
// neither a GPUQ_ nor a PG variable, for which the config file in dir (or
// in a directory above the command's) decides, and it talks HTTP.
func devClients(t *testing.T, bin, dir string) (natsEnv, httpEnv []string) {
	t.Helper()
	_, natsEnv, httpEnv = startDevClients(t, bin, dir)
	return natsEnv, httpEnv
}

// startDevClients is devClients that also returns the gpuq dev it started.
func startDevClients(t *testing.T, bin, dir string) (dev *devRun, natsEnv, httpEnv []string) {
	t.Helper()
	dev = startDev(t, bin, dir, "--http-addr", "127.0.0.1:0")
	var conf struct {
		NATSURL    string `json:"nats-url"`
		Credential string `json:"nats-credential"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, devConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &conf); err != nil || conf.NATSURL == "" || conf.Credential == "" {
		t.Fatalf("%s: %v (%+v)", devConfigFile, err, conf)
	}
	natsEnv = clientEnv(conf.NATSURL, conf.Credential)
	return dev, natsEnv, natsEnv[2:]
}
