package cli

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
)

// A pipeline from the shell, as the README writes it: a job submitted with
// --after waits for the one it names, gpuq status says for what, and it
// runs once that one has succeeded. When a step fails, the steps after it
// are cancelled saying why; retrying the failed step and then the others
// runs them in order.
func TestSubmitAfterRunsAJobOnceTheJobsItNamesHaveSucceeded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes")
	}
	t.Parallel()
	_, config := startDevHere(t)
	gpuq := func(want int, args ...string) (string, error) {
		t.Helper()
		out, errOut, err := runCLI(t, append(args[:1:1], append([]string{"--config", config}, args[1:]...)...)...)
		if code := exitCode(err); err == nil && want != 0 || err != nil && code != want {
			t.Fatalf("gpuq %s: exit %d (%v), want %d\n%s%s", strings.Join(args, " "), code, err, want, out, errOut)
		}
		return strings.TrimSpace(out), err
	}
	prep, _ := gpuq(0, "submit", "--name", "prep", "--", "sh", "-c", "sleep 3; echo prepared")
	train, _ := gpuq(0, "submit", "--name", "train", "--after", prep, "--", "sh", "-c", "echo trained")
	if st, _ := gpuq(0, "status", train); !strings.Contains(st, "\nstate      waiting\n") ||
		!strings.Contains(st, fmt.Sprintf("\nafter      %s (prep) ", prep)) ||
		!strings.Contains(st, fmt.Sprintf("waiting for job %s (prep) to succeed", prep)) {
		t.Fatalf("status of a job waiting for another:\n%s", st)
	}
	if ls, _ := gpuq(0, "ls", "--state", "waiting"); !strings.Contains(ls, train) {
		t.Fatalf("ls --state waiting:\n%s", ls)
	}
	gpuq(0, "wait", train)
	if out, _ := gpuq(0, "logs", train); out != "trained" {
		t.Fatalf("train's output: %q", out)
	}
	if st, _ := gpuq(0, "status", train); !strings.Contains(st, fmt.Sprintf("\nafter      %s (prep) succeeded\n", prep)) {
		t.Fatalf("status of a job that ran after another:\n%s", st)
	}

	// The first attempt of fetch fails; the steps after it are cancelled.
	fetch, _ := gpuq(0, "submit", "--name", "fetch", "--label", "pipe=fe", "--max-errors", "0", "--", "sh", "-c", `sleep 3; test "$GPUQ_ATTEMPT" -ge 2`)
	fit, _ := gpuq(0, "submit", "--name", "fit", "--label", "pipe=fe", "--after", fetch, "--", "true")
	eval, _ := gpuq(0, "submit", "--name", "eval", "--label", "pipe=fe", "--after", fit+","+prep, "--", "true")
	// The same without a label, for retry --downstream.
	one, _ := gpuq(0, "submit", "--name", "one", "--max-errors", "0", "--", "sh", "-c", `sleep 3; test "$GPUQ_ATTEMPT" -ge 2`)
	two, _ := gpuq(0, "submit", "--name", "two", "--after", one, "--", "true")
	three, _ := gpuq(0, "submit", "--name", "three", "--after", two, "--", "true")
	if ls, _ := gpuq(0, "ls", "--runs-after", one); !strings.Contains(ls, two) || strings.Contains(ls, three) {
		t.Fatalf("ls --runs-after one: want two alone\n%s", ls)
	}
	// eval, cancelled in turn after fit, names the step to retry: fetch.
	if _, err := gpuq(ExitCancelled, "wait", eval); !strings.Contains(err.Error(), fmt.Sprintf("job %s (fetch) it runs after ended failed: retry it and the jobs after it (gpuq retry --downstream %[1]s)", fetch)) {
		t.Fatalf("wait of a job after a cancelled one: %v", err)
	}
	if _, err := gpuq(ExitRejected, "retry", fit); !strings.Contains(err.Error(), fmt.Sprintf("job %s (fetch) it runs after ended failed: retry it and the jobs after it (gpuq retry --downstream %[1]s)", fetch)) {
		t.Fatalf("retry of a job after a failed one: %v", err)
	}
	// Retried by their label, the steps are retried in the order they
	// were submitted: fetch first, then the two that wait for it again.
	if out, _ := gpuq(0, "retry", "--label", "pipe=fe"); !regexp.MustCompile(`^`+fetch+` (placed|running) on pool `).MatchString(out) ||
		!strings.Contains(out, "\n"+fit+" waiting\n"+eval+" waiting") {
		t.Fatalf("retry --label of a pipeline: want fetch placed, then fit and eval waiting, got\n%s", out)
	}
	gpuq(0, "wait", eval)
	// Retried with --downstream, the failed step brings back the steps
	// cancelled after it, in turn, in the order they were submitted; its
	// status says so.
	gpuq(ExitCancelled, "wait", three)
	if st, _ := gpuq(0, "status", one); !strings.Contains(st, fmt.Sprintf("\nbefore     %s (two) cancelled\n", two)) ||
		!strings.Contains(st, fmt.Sprintf("\nretry      gpuq retry --downstream %s runs it again, then the jobs after it that did not succeed\n", one)) {
		t.Fatalf("status of a failed step with steps cancelled after it:\n%s", st)
	}
	if out, _ := gpuq(0, "retry", "--downstream", one); !regexp.MustCompile(`^`+one+` (placed|running) on pool `).MatchString(out) ||
		!strings.Contains(out, "\n"+two+" waiting\n"+three+" waiting") {
		t.Fatalf("retry --downstream of a pipeline's failed first step: want it placed, then two and three waiting, got\n%s", out)
	}
	gpuq(0, "wait", three)
	// A step that succeeded, given to retry --downstream, is not run
	// again: the steps after it that failed are.
	ok, _ := gpuq(0, "submit", "--name", "ok", "--", "true")
	bad, _ := gpuq(0, "submit", "--name", "bad", "--after", ok, "--max-errors", "0", "--", "sh", "-c", `test "$GPUQ_ATTEMPT" -gt 1`)
	gpuq(ExitFailed, "wait", bad)
	out, errOut, err := runCLI(t, "retry", "--config", config, "--downstream", ok, "--wait")
	if err != nil || !strings.Contains(out, bad+" succeeded") || strings.Contains(out, ok) ||
		!strings.Contains(errOut, fmt.Sprintf("gpuq: %s (ok) succeeded: it is not run again, the jobs after it that did not succeed are\n", ok)) {
		t.Fatalf("retry --downstream of a step that succeeded, before one that failed: %v\n%s%s", err, out, errOut)
	}
	out, errOut, err = runCLI(t, "cancel", "--config", config, "--downstream", ok)
	if err != nil || out != "" || !strings.Contains(errOut, fmt.Sprintf("gpuq: %s (ok) has finished (succeeded): the jobs after it that have not are cancelled\n", ok)) {
		t.Fatalf("cancel --downstream of a finished step with nothing unfinished after it: %v\n%s%s", err, out, errOut)
	}
	// Cancelled with --downstream, a pipeline is abandoned whole, newest
	// first: the report after gather's end is not released to run.
	fetchAll, _ := gpuq(0, "submit", "--name", "fetch-all", "--", "sleep", "60")
	gather, _ := gpuq(0, "submit", "--name", "gather", "--after", fetchAll, "--", "true")
	report, _ := gpuq(0, "submit", "--name", "report", "--after-ended", gather, "--", "true")
	if out, _ := gpuq(0, "cancel", "--downstream", fetchAll); out != fmt.Sprintf("%s cancelled\n%s cancelled\n%s cancelled", report, gather, fetchAll) {
		t.Fatalf("cancel --downstream of a pipeline's first step: want report, gather, then fetch-all cancelled, got\n%s", out)
	}
	if st, _ := gpuq(0, "status", report); !strings.Contains(st, "\nstate      cancelled\n") || !strings.Contains(st, "\nattempts   0 ") {
		t.Fatalf("status of the report after a pipeline cancelled whole: want cancelled, never run\n%s", st)
	}
	if _, err := gpuq(ExitGeneral, "ls", "--runs-after", "one"); !strings.Contains(err.Error(), `--runs-after: want a job id as gpuq prints it, got "one"`) {
		t.Fatalf("ls --runs-after a name: %v", err)
	}

	// After a whole sweep, as the README does it: the ids --batch prints,
	// joined by commas. One run fails: the job after every run's success
	// is cancelled, the summary after every run's end runs.
	sweep := writeFile(t, "sweep.yaml", "jobs:\n  - {name: lr-0.1, command: [sh, -c, 'sleep 1']}\n  - {name: lr-0.01, command: [sh, -c, 'sleep 2; exit 3'], retries: {max_errors: 0}}\n")
	ids, _ := gpuq(0, "submit", "--batch", sweep, "--label", "sweep=lr")
	joined := strings.ReplaceAll(ids, "\n", ",")
	best, _ := gpuq(0, "submit", "--name", "best", "--after", joined, "--", "true")
	summary, _ := gpuq(0, "submit", "--name", "summary", "--after-ended", joined, "--", "true")
	if st, _ := gpuq(0, "status", summary); strings.Count(st, "\nafter end  ") != 2 || !strings.Contains(st, "waiting for 2 of the 2 jobs it runs after to end") {
		t.Fatalf("status of a job after a sweep of two ended:\n%s", st)
	}
	gpuq(0, "wait", summary)
	if _, err := gpuq(ExitCancelled, "wait", best); !strings.Contains(err.Error(), "(lr-0.01) it runs after ended failed") {
		t.Fatalf("wait of the job after the sweep's success: %v", err)
	}
	if st, _ := gpuq(0, "status", summary); !strings.Contains(st, "(lr-0.01) failed\n") || !strings.Contains(st, "\nstate      succeeded\n") {
		t.Fatalf("status of the summary:\n%s", st)
	}

	// Bad ids are refused naming the field, nothing submitted.
	if _, err := gpuq(ExitGeneral, "submit", "--after", uuid.NewString(), "--", "true"); !strings.Contains(err.Error(), "spec.after[0]") {
		t.Fatalf("submit --after an unknown job: %v", err)
	}
	if _, err := gpuq(ExitGeneral, "submit", "--after", "prep", "--", "true"); !strings.Contains(err.Error(), "spec.after[0]: must be a job id") {
		t.Fatalf("submit --after a name: %v", err)
	}
	if _, err := gpuq(ExitGeneral, "submit", "--after", prep, "--after-ended", prep, "--", "true"); !strings.Contains(err.Error(), "spec.after_ended[0]: "+prep+" is in spec.after too") {
		t.Fatalf("submit --after and --after-ended one job: %v", err)
	}
}

// gpuq status lists up to five jobs a job runs after; past five it counts
// them by state and lists the first five that have not succeeded.
func TestStatusSumsUpManyJobsAJobRunsAfter(t *testing.T) {
	t.Parallel()
	var deps []queue.Dependency
	for i := range 8 {
		st := queue.StateSucceeded
		if i%2 == 1 {
			st = queue.StateRunning
		}
		deps = append(deps, queue.Dependency{ID: uuid.New(), Name: fmt.Sprintf("lr-%d", i), State: st})
	}
	deps = append(deps, queue.Dependency{ID: uuid.New()})
	got := afterLines(deps, false)
	want := []string{"9 jobs: 4 succeeded, 4 running, 1 not of this project",
		deps[1].ID.String() + " (lr-1) running", deps[3].ID.String() + " (lr-3) running", deps[5].ID.String() + " (lr-5) running",
		deps[7].ID.String() + " (lr-7) running", deps[8].ID.String() + " is not a job of this project"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := afterLines(deps[:2], false); len(got) != 2 || got[0] != deps[0].ID.String()+" (lr-0) succeeded" {
		t.Fatalf("two jobs: %q", got)
	}
	// For after_ended, a job that failed is done with as much as one
	// that succeeded.
	ends := []queue.Dependency{deps[0], {ID: uuid.New(), State: queue.StateFailed}, deps[1], deps[2], deps[3], deps[4]}
	if got := afterLines(ends, true); len(got) != 3 || got[0] != "6 jobs: 3 succeeded, 1 failed, 2 running" || got[1] != deps[1].ID.String()+" (lr-1) running" {
		t.Fatalf("after_ended lines: %q", got)
	}
}

// The README's pipeline file runs as written: its jobs name earlier ones by
// name, the summary runs after both train runs, once they have ended.
func TestTheReadmesPipelineRunsAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes")
	}
	t.Parallel()
	path, _, gpuq := readmeBatch(t, "pipeline.yaml")
	ids := strings.Fields(gpuq("submit", "--batch", path, "--label", "pipe=p1"))
	if len(ids) != 4 {
		t.Fatalf("submit --batch pipeline.yaml: want four ids, got %v", ids)
	}
	if out := gpuq("wait", "--label", "pipe=p1"); strings.Count(out, " succeeded") != 4 {
		t.Fatalf("wait --label: %s", out)
	}
	prep, train1, train2, summary := ids[0], ids[1], ids[2], ids[3]
	for _, train := range []string{train1, train2} {
		if st := gpuq("status", train); !strings.Contains(st, fmt.Sprintf("\nafter      %s (prep) succeeded\n", prep)) ||
			!strings.Contains(st, fmt.Sprintf("\ninput      prep: the outputs of job %s (prep), succeeded, in $GPUQ_INPUT_DIR/prep\n", prep)) {
			t.Fatalf("status of a train run:\n%s", st)
		}
	}
	st := gpuq("status", summary)
	if !strings.Contains(st, fmt.Sprintf("\nafter end  %s (train) succeeded\nafter end  %s (train) succeeded\n", train1, train2)) {
		t.Fatalf("status of the summary:\n%s", st)
	}
	// Each step read what the steps before it left.
	for _, train := range []string{train1, train2} {
		if out := gpuq("logs", train); out != "3 rows\n" {
			t.Fatalf("a train run's output: %q, want prep's data.txt", out)
		}
	}
	if out := gpuq("logs", summary); out != "lr 0.1\nlr 0.01\n" {
		t.Fatalf("summary's output: %q, want each train run's result.txt in the file's order", out)
	}
	// The README's logs --label line: each step's output under a line
	// naming it, in the order submitted (the two train runs, submitted
	// at once, in either order).
	logsOf := func(first, second string) string {
		return fmt.Sprintf("==> %s (prep) succeeded <==\n\n==> %s (train) succeeded <==\n3 rows\n\n==> %s (train) succeeded <==\n3 rows\n\n==> %s (summary) succeeded <==\nlr 0.1\nlr 0.01\n",
			prep, first, second, summary)
	}
	if out := gpuq("logs", "--label", "pipe=p1"); out != logsOf(train1, train2) && out != logsOf(train2, train1) {
		t.Fatalf("logs --label pipe=p1:\n%s\nwant\n%s", out, logsOf(train1, train2))
	}
	if out := gpuq("logs", train2, summary, "-o", "json"); strings.Count(out, `"job":"`+train2+`"`) != 1 || strings.Count(out, `"job":"`+summary+`"`) != 2 || strings.Contains(out, "==>") {
		t.Fatalf("logs of two jobs, -o json:\n%s", out)
	}

	// From the command line: --input NAME=ID, and a job of after_ended
	// that failed, of which there is nothing to read.
	config := filepath.Join(filepath.Dir(path), devConfigFile)
	submit := func(args ...string) string {
		t.Helper()
		out, errOut, err := runCLI(t, append([]string{"submit", "--config", config}, args...)...)
		if err != nil {
			t.Fatalf("gpuq submit %v: %v\n%s%s", args, err, out, errOut)
		}
		return strings.Fields(out)[0]
	}
	if out := gpuq("logs", submit("--input", "p="+prep, "--wait", "--", "sh", "-c", "cat $GPUQ_INPUT_DIR/p/data.txt")); out != "3 rows\n" {
		t.Fatalf("a job of --input p=PREP: %q", out)
	}
	failed := submit("--max-errors", "0", "--", "sh", "-c", "exit 3")
	after := submit("--after-ended", failed, "--input", failed, "--wait", "--", "sh", "-c", "ls $GPUQ_INPUT_DIR; echo read")
	out, errOut, err := runCLI(t, "logs", "--config", config, after)
	if err != nil || !strings.Contains(out, "read\n") ||
		!strings.Contains(out+errOut, fmt.Sprintf("gpuq: input %s: job %[1]s failed, leaving no outputs; $GPUQ_INPUT_DIR/%[1]s is not there\n", failed)) {
		t.Fatalf("logs of a job reading a failed job's outputs: %v\n%s%s", err, out, errOut)
	}
	// An input of no job of the project changes nothing.
	unknown := uuid.NewString()
	out, errOut, err = runCLI(t, "submit", "--config", config, "--input", "x="+unknown, "--", "true")
	if exitCode(err) != 1 || !strings.Contains(fmt.Sprint(err), "spec.inputs[0].job: no job "+unknown+" in project default") {
		t.Fatalf("an input of no job: exit %d (%v)\n%s%s", exitCode(err), err, out, errOut)
	}
}
