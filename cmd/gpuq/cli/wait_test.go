package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// gpuq wait takes several job ids, or the label of a sweep submitted with
// gpuq submit --label: against gpuq dev as a user runs it, it waits for
// each job, prints each one's outcome in the order submitted, names on
// stderr each that did not succeed, and exits 0 only when every one
// succeeded, else with the status their outcomes share, else 1. gpuq logs
// of a job retried tells its attempts apart.
func TestWaitTakesSeveralJobsOrASweepsLabelAndLogsTellAttemptsApart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes")
	}
	t.Parallel()
	dir, config := startDevHere(t)
	submit := func(args ...string) string {
		t.Helper()
		out, errOut, err := runCLI(t, append([]string{"submit", "--config", config}, args...)...)
		if err != nil {
			t.Fatalf("submit %v: %v\n%s", args, err, errOut)
		}
		return strings.TrimSpace(out)
	}
	ok := submit("--label", "sweep=lr", "--label", "lr=0.1", "--", "sh", "-c", "sleep 1")
	bad := submit("--label", "sweep=lr", "--label", "lr=0.2", "--max-errors", "0", "--", "sh", "-c", "exit 3")
	fine := submit("--label", "sweep=lr", "--label", "lr=0.3", "--", "true")
	other := submit("--label", "sweep=other", "--", "true")

	out, errOut, err := runCLI(t, "wait", "--config", config, "--label", "sweep=lr")
	if exitCode(err) != ExitFailed || !strings.Contains(err.Error(), "1 of 3 jobs did not succeed (1 failed)") {
		t.Errorf("wait --label: want exit %d naming 1 of 3 failed, got %v", ExitFailed, err)
	}
	want := ok + " succeeded\n" + bad + " failed\n" + fine + " succeeded\n"
	if out != want {
		t.Errorf("wait --label: want the sweep's outcomes in the order submitted:\n%s\ngot:\n%s", want, out)
	}
	if !strings.Contains(errOut, "job "+bad+" failed: exited with status 3") {
		t.Errorf("wait --label: want the failed job and its reason on stderr, got:\n%s", errOut)
	}

	missing := uuid.NewString()
	out, errOut, err = runCLI(t, "wait", "--config", config, "-o", "json", other, fine, missing, bad)
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "2 of 4 jobs did not succeed (1 not found, 1 failed)") {
		t.Errorf("wait of ids of which one is missing and one failed: want exit 1, got %v", err)
	}
	var page JobPage
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		t.Fatalf("wait -o json: %v\n%s", err, out)
	}
	var got []string
	for _, j := range page.Jobs {
		got = append(got, j.ID.String()+" "+string(j.State))
	}
	if strings.Join(got, ",") != other+" succeeded,"+fine+" succeeded,"+bad+" failed" {
		t.Errorf("wait -o json: want the three jobs found, in order, got %v", got)
	}
	if !strings.Contains(errOut, "job "+missing+" not found") {
		t.Errorf("wait: want the missing job named on stderr, got:\n%s", errOut)
	}
	if _, _, err := runCLI(t, "wait", "--config", config, ok, fine, other); err != nil {
		t.Errorf("wait of jobs that all succeeded: %v", err)
	}
	if _, _, err := runCLI(t, "wait", "--config", config, missing, uuid.NewString()); exitCode(err) != ExitNotFound {
		t.Errorf("wait of jobs none of which exists: want exit %d, got %v", ExitNotFound, err)
	}
	if _, _, err := runCLI(t, "wait", "--config", config, "--label", "sweep=l"); exitCode(err) != ExitNotFound || !strings.Contains(err.Error(), "no job has the label sweep=l") {
		t.Errorf("wait --label of a label no job has: want exit %d naming it, got %v", ExitNotFound, err)
	}

	// The timeout bounds the whole wait; the jobs go on.
	long := submit("--", "sh", "-c", "echo started; sleep 300")
	out, errOut, err = runCLI(t, "wait", "--config", config, "--timeout", "2s", fine, long)
	if exitCode(err) != ExitTimedOut || !strings.Contains(err.Error(), "1 of 2 jobs not finished after 2s") {
		t.Errorf("wait --timeout with a long job: want exit %d, got %v\n%s", ExitTimedOut, err, errOut)
	}
	if out != fine+" succeeded\n" {
		t.Errorf("wait --timeout: want the finished job printed, got %q", out)
	}
	// Ctrl-C ends a wait or a followed log, not the job: exit 130, and the
	// wait says how to follow or stop the job.
	bin := buildGpuq(t)
	for _, args := range [][]string{{"wait", long}, {"wait", fine, long}, {"logs", "-f", long}, {"submit", "--wait", "--label", "sweep=interrupted", "--", "sleep", "300"}} {
		var stdout, stderr syncBuffer
		c := exec.Command(bin, append([]string{args[0], "--config", config}, args[1:]...)...)
		c.Stdout, c.Stderr = &stdout, &stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		// Once it shows progress or output, its signal handler is in place:
		// a SIGINT before would be lost where the test runs with SIGINT
		// ignored (a background job of a shell), as it would kill it in a
		// terminal.
		for deadline := time.Now().Add(30 * time.Second); stdout.String() == "" && stderr.String() == "" && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		if err := c.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		err := c.Wait()
		want := "gpuq: interrupted\n"
		switch {
		case len(args) == 2 && args[0] == "wait":
			want = "gpuq: interrupted; job " + long + " goes on (gpuq wait " + long + " follows it again, gpuq cancel " + long + " stops it)\n"
		case args[0] == "wait":
			want = "gpuq: interrupted; 1 of 2 jobs not waited for go on\n"
		case args[0] == "submit":
			// Its id was not printed yet: the message names it.
			if m := regexp.MustCompile(`gpuq: interrupted; job (\S+) goes on`).FindStringSubmatch(stderr.String()); m != nil {
				want = "gpuq: interrupted; job " + m[1] + " goes on (gpuq wait " + m[1] + " follows it again, gpuq cancel " + m[1] + " stops it)\n"
			}
		}
		if c.ProcessState.ExitCode() != ExitInterrupted || !strings.HasSuffix(stderr.String(), want) {
			t.Errorf("gpuq %v interrupted: want exit %d and %q last on stderr, got %v:\n%s", args, ExitInterrupted, want, err, stderr.String())
		}
	}
	if _, _, err := runCLI(t, "cancel", "--config", config, "--label", "sweep=interrupted"); err != nil {
		t.Errorf("cancel of the job submitted with --wait: %v", err)
	}
	if _, _, err := runCLI(t, "wait", "--config", config, "--timeout", "1s", long); exitCode(err) != ExitTimedOut {
		t.Errorf("the job whose wait was interrupted must go on: want wait --timeout to exit %d, got %v", ExitTimedOut, err)
	}
	if _, _, err := runCLI(t, "cancel", "--config", config, long); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(t, "wait", "--config", config, fine, long); exitCode(err) != ExitCancelled {
		t.Errorf("wait of a succeeded and a cancelled job: want exit %d, got %v", ExitCancelled, err)
	}

	// On a terminal, a wait for several jobs is one line: how many have
	// finished, then the job waited for now, erased once all are. (Each
	// pool has one slot here: these come once the long jobs are cancelled,
	// not to queue behind them.)
	first, second := submit("--", "sleep", "1"), submit("--", "sleep", "2")
	term := &fakeTerminal{}
	var stdout strings.Builder
	waitCmd := New()
	waitCmd.SetArgs([]string{"wait", "--config", config, first, second})
	waitCmd.SetOut(&stdout)
	waitCmd.SetErr(term)
	if err := waitCmd.Execute(); err != nil || stdout.String() != first+" succeeded\n"+second+" succeeded\n" {
		t.Fatalf("wait of two jobs: %v\n%s", err, stdout.String())
	}
	shown := term.String()
	if !strings.Contains(shown, "\r\033[K0 of 2 finished · …"+first[24:]) || !strings.Contains(shown, "\r\033[K1 of 2 finished (1 succeeded) · …"+second[24:]) ||
		strings.Contains(shown, "\n") || !strings.HasSuffix(shown, "\r\033[K") {
		t.Errorf("wait of two jobs on a terminal: want one line showing the count and the job waited for, erased at the end, got %q", shown)
	}

	// A retried job's output: each attempt's after the other, where one
	// ends said on stderr; --attempt picks one.
	spec := filepath.Join(dir, "retried.yaml")
	if err := os.WriteFile(spec, []byte("retries: {max_errors: 1, delay: 1s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	retried := submit("-f", spec, "--", "sh", "-c", "echo attempt $GPUQ_ATTEMPT; exit 3")
	if _, _, err := runCLI(t, "wait", "--config", config, retried); exitCode(err) != ExitFailed {
		t.Fatalf("wait of a job that always exits 3: want exit %d, got %v", ExitFailed, err)
	}
	out, errOut, err = runCLI(t, "logs", "--config", config, retried)
	if err != nil || out != "attempt 1\nattempt 2\n" || errOut != "gpuq: attempt 2's output follows\n" {
		t.Errorf("logs of a job run twice: want both attempts' output, the second announced on stderr; got %v %q %q", err, out, errOut)
	}
	out, errOut, err = runCLI(t, "logs", "--config", config, "--attempt", "2", retried)
	if err != nil || out != "attempt 2\n" || errOut != "" {
		t.Errorf("logs --attempt 2: want the second attempt's output alone, got %v %q %q", err, out, errOut)
	}
	out, _, err = runCLI(t, "logs", "--config", config, "--attempt", "1", "-o", "json", retried)
	if err != nil || strings.TrimSpace(out) != `{"attempt":1,"line":"attempt 1","stream":"stdout"}` {
		t.Errorf("logs --attempt 1 -o json: want the first attempt's line, got %v %q", err, out)
	}
	if _, _, err := runCLI(t, "logs", "--config", config, "--attempt", "-1", retried); err == nil || !strings.Contains(err.Error(), "--attempt: must be 1 or more") {
		t.Errorf("logs --attempt -1: want the flag named, got %v", err)
	}
	if out, _, err := runCLI(t, "logs", "--config", config, "--attempt", "3", retried); err == nil || out != "" || !strings.Contains(err.Error(), "--attempt 3: job "+retried+" has had 2 attempt(s)") {
		t.Errorf("logs --attempt 3 of a job run twice: want an error saying it had 2, got %v %q", err, out)
	}

	for _, tc := range []struct{ args, want string }{
		{"", "wait takes job ids or --label KEY=VALUE"},
		{"--label sweep=lr " + ok, "wait takes job ids or --label, not both"},
		{"--label sweep", `--label: want key=value, got "sweep"`},
		{"not-a-job", `job id "not-a-job": not a job id`},
	} {
		_, _, err := runCLI(t, append([]string{"wait", "--config", config}, strings.Fields(tc.args)...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gpuq wait %s: want %q, got %v", tc.args, tc.want, err)
		}
	}
	if _, _, err := runCLI(t, "submit", "--config", config, "--label", "sweep", "--", "true"); err == nil || !strings.Contains(err.Error(), `--label: want KEY=VALUE, got "sweep"`) {
		t.Errorf("submit --label without =: want the flag named, got %v", err)
	}
	if j, _, err := runCLI(t, "ls", "--config", config, "--label", "lr=0.2", "-o", "json"); err != nil || !strings.Contains(j, bad) || strings.Contains(j, ok) {
		t.Errorf("ls --label lr=0.2: want only the job submitted with it, got %v\n%s", err, j)
	}
}

// startDevHere starts gpuq dev as a user does (startDev), in a directory
// of its own with its HTTP API on a port the system picks (one picked here
// could be taken by a test beside this one before dev binds it), and
// returns the directory and the config file dev wrote there, with that
// port, for the client commands.
func startDevHere(t *testing.T) (dir, config string) {
	t.Helper()
	dir = t.TempDir()
	startDev(t, buildGpuq(t), dir, "--http-addr", "127.0.0.1:0")
	return dir, filepath.Join(dir, devConfigFile)
}

// gpuq submit --follow, against gpuq dev as a user runs it, prints the job's
// output as it comes, every attempt's, with only the job's output on
// standard output, then exits as --wait does: 0 on success, the failed
// job's status and reason otherwise.
func TestSubmitFollowPrintsTheJobsOutputThenExitsWithItsOutcome(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes")
	}
	t.Parallel()
	_, config := startDevHere(t)
	// The first attempt fails and is retried a second later.
	spec := writeFile(t, "flaky.yaml", "command: [sh, -c, 'echo \"attempt $GPUQ_ATTEMPT\"; sleep 0.5; echo done; test \"$GPUQ_ATTEMPT\" = 2']\nretries: {max_errors: 1, delay: 1s}\n")
	out, errOut, err := runCLI(t, "submit", "--config", config, "--follow", "-f", spec)
	if err != nil {
		t.Fatalf("submit --follow of a job that succeeds on its second attempt: %v\n%s", err, errOut)
	}
	if out != "attempt 1\ndone\nattempt 2\ndone\n" {
		t.Fatalf("submit --follow: want only the job's output of both attempts on stdout, got %q", out)
	}
	m := regexp.MustCompile(`^gpuq: job (\S+) submitted; its output follows\n`).FindStringSubmatch(errOut)
	if m == nil || !strings.Contains(errOut, "gpuq: attempt 2's output follows\n") || !strings.HasSuffix(errOut, "gpuq: job "+m[1]+" succeeded\n") {
		t.Fatalf("submit --follow: want the job's id, where attempt 2 begins and its outcome on stderr, got:\n%s", errOut)
	}

	out, _, err = runCLI(t, "submit", "--config", config, "--follow", "--max-errors", "0", "--", "sh", "-c", "echo out; exit 3")
	if exitCode(err) != ExitFailed || !strings.Contains(err.Error(), "failed: exited with status 3 (gpuq retry ") || out != "out\n" {
		t.Fatalf("submit --follow of a failing job: want exit %d with its reason and its output, got %v, %q", ExitFailed, err, out)
	}
	for _, args := range [][]string{{"-o", "json", "--", "true"}, {"--no-wait-accept", "--", "true"}, {"--batch", writeFile(t, "b.json", `{"jobs": [{"command": ["true"]}]}`)}} {
		if _, _, err := runCLI(t, append([]string{"submit", "--config", config, "--follow"}, args...)...); err == nil || !strings.Contains(err.Error(), "--follow prints") {
			t.Fatalf("submit --follow %v: want a refusal, got %v", args, err)
		}
	}

	// gpuq logs -f --prefix follows a sweep's jobs at once (one on each of
	// gpuq dev's pools), each line under its job's name and short id: the
	// second job's first line comes while the first job sleeps.
	tags := map[string]string{}
	for _, name := range []string{"ja", "jb"} {
		l, tier := name[1:], map[string]string{"ja": "spot", "jb": "on-demand"}[name]
		id, errOut, err := runCLI(t, "submit", "--config", config, "--name", name, "--tier", tier, "--label", "sweep=both", "--", "sh", "-c", "echo "+l+"1; sleep 4; printf "+l+"2")
		if err != nil {
			t.Fatalf("submit %s: %v\n%s", name, err, errOut)
		}
		tags[l] = "[" + name + " " + shortID(uuid.MustParse(strings.TrimSpace(id))) + "] "
	}
	out, errOut, err = runCLI(t, "logs", "--config", config, "-f", "--prefix", "--label", "sweep=both")
	if err != nil {
		t.Fatalf("logs -f --prefix --label: %v\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 || slices.Index(lines, tags["b"]+"b1") > slices.Index(lines, tags["a"]+"a2") || slices.Index(lines, tags["a"]+"a1") < 0 ||
		slices.Index(lines, tags["b"]+"b2") < 0 || slices.Index(lines, tags["b"]+"b1") < 0 {
		t.Fatalf("logs -f --prefix: want each job's two lines under its tag, the second job's first before the first job's last, got:\n%s", out)
	}
}
