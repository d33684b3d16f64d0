package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control/httpapi"
)

// writeBatch writes a batch file into a fresh directory.
func writeBatch(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sweep.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A batch is checked whole before anything is submitted: a bad spec, a bad
// file or a flag that cannot apply to every job is an error before any
// connection, naming the job and its field.
func TestSubmitBatchRefusesABadBatchBeforeConnecting(t *testing.T) {
	t.Parallel()
	good := "  - {name: a, command: [echo, a]}\n"
	for name, c := range map[string]struct {
		batch string
		args  []string
		want  string
	}{
		"a bad spec":              {batch: "jobs:\n" + good + "  - {name: b, command: [echo], resources: {gpu: {count: 0}}}\n", want: "jobs[1]: invalid job spec: spec.resources.gpu.count: must be 1–16, got 0"},
		"an unknown field":        {batch: "jobs:\n" + good + "  - {name: b, command: [echo], gpus: 1}\n", want: "jobs[1]: invalid job spec: spec.gpus: unknown field"},
		"no jobs":                 {batch: "jobs: []\n", want: "--batch: jobs must hold 1–10000 job specs, got 0"},
		"a list, not a batch":     {batch: good, want: `--batch: the file must be an object holding jobs`},
		"a field beside jobs":     {batch: "jobs:\n" + good + "sweep: lr\n", want: `unknown field "sweep"`},
		"a bad flag":              {batch: "jobs:\n" + good, args: []string{"--label", "sweep"}, want: `jobs[0]: --label: want KEY=VALUE, got "sweep"`},
		"a flag breaking a job":   {batch: "jobs:\n" + good, args: []string{"--gpu-count", "99"}, want: "jobs[0]: invalid job spec: spec.resources.gpu.count: must be 1–16, got 99"},
		"a command":               {batch: "jobs:\n" + good, args: []string{"--", "echo"}, want: "--batch: each job of a batch names its own command"},
		"a shared key":            {batch: "jobs:\n" + good, args: []string{"--idempotency-key", "k"}, want: "--idempotency-key: each job of a batch has its own"},
		"an alias":                {batch: "jobs:\n  - &a {name: a, command: [echo, a]}\n  - *a\n", want: "--batch: batch.jobs[0] (line 2): YAML anchor &a: aliases and anchors are not accepted"},
		"-f beside it":            {batch: "jobs:\n" + good, args: []string{"-f", "job.yaml"}, want: "--batch and -f: give one"},
		"a name of no job before": {batch: "jobs:\n  - {name: b, command: [echo], after: [a]}\n" + good, want: `jobs[0]: invalid job spec: spec.after[0]: no job named "a" before it in the file`},
		"a job named twice":       {batch: "jobs:\n" + good + "  - {name: c, command: [echo], after: [a], after_ended: [a]}\n", want: `jobs[1]: invalid job spec: spec.after_ended[0]: "a" names jobs[0], which the job names already`},
		"an input of no job":      {batch: "jobs:\n" + good + "  - {name: c, command: [echo], inputs: [{job: a}, {name: m, job: model}]}\n", want: `jobs[1]: invalid job spec: spec.inputs[1].job: no job named "model" before it in the file`},
		"an input named twice":    {batch: "jobs:\n" + good + "  - {name: c, command: [echo], inputs: [{job: a}, {job: a}]}\n", want: `jobs[1]: invalid job spec: spec.inputs[1].job: "a" names jobs[0], whose outputs an input reads already`},
		"a name of a later job":   {batch: "jobs:\n" + good + "  - {name: c, command: [echo], after_ended: [a, d]}\n  - {name: d, command: [echo]}\n", want: `jobs[1]: invalid job spec: spec.after_ended[1]: no job named "d" before it in the file`},
	} {
		path := writeBatch(t, c.batch)
		// An unreachable server: nothing can have been published.
		args := append([]string{"submit", "--batch", path, "--nats-url", "nats://127.0.0.1:1"}, c.args...)
		_, _, err := runCLI(t, args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want an error containing %q, got %v", name, c.want, err)
		}
		if strings.HasPrefix(c.want, "jobs[") && !strings.HasSuffix(err.Error(), "; nothing was submitted") {
			t.Errorf("%s: want the error to say nothing was submitted, got %v", name, err)
		}
	}
}

// Through the HTTP API, as gpuq dev's config file points the CLI: the spec
// flags complete every job of the batch, --wait waits for each, gpuq
// results --label downloads each one's outputs, and a re-run with the same
// idempotency keys answers the same jobs.
func TestASweepSubmittedAsABatchIsWaitedForAndItsResultsDownloadedOverHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes")
	}
	t.Parallel()
	_, config := startDevHere(t)
	path := writeBatch(t, `jobs:
  - {name: lr-0.1, idempotency_key: lr-0.1, command: [sh, -c, 'echo 0.1 > $GPUQ_OUTPUT_DIR/lr'], labels: {lr: "0.1"}}
  - {name: lr-0.01, idempotency_key: lr-0.01, command: [sh, -c, 'echo 0.01 > $GPUQ_OUTPUT_DIR/lr'], labels: {lr: "0.01"}}
  - {name: lr-0.001, idempotency_key: lr-0.001, command: [sh, -c, 'echo 0.001 > $GPUQ_OUTPUT_DIR/lr'], labels: {lr: "0.001"}}
`)
	out, errOut, err := runCLI(t, "submit", "--config", config, "--batch", path, "--label", "sweep=lr", "--cpu", "1", "--wait")
	if err != nil {
		t.Fatalf("submit --batch --wait: %v\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("submit --batch --wait: want a line per job, got\n%s", out)
	}
	var ids []string
	for _, l := range lines {
		id, state, _ := strings.Cut(l, " ")
		if state != "succeeded" {
			t.Fatalf("submit --batch --wait: want every job succeeded, got\n%s", out)
		}
		ids = append(ids, id)
	}
	// Each job is its spec completed by the flags.
	for i, lr := range []string{"0.1", "0.01", "0.001"} {
		js, errOut, err := runCLI(t, "status", "--config", config, ids[i], "-o", "json")
		if err != nil {
			t.Fatalf("status: %v\n%s", err, errOut)
		}
		var st struct {
			Job queue.Job `json:"job"`
		}
		if err := json.Unmarshal([]byte(js), &st); err != nil {
			t.Fatal(err)
		}
		if s := st.Job.Spec; s.Name != "lr-"+lr || s.Labels["lr"] != lr || s.Labels["sweep"] != "lr" || s.Resources.CPU != 1 {
			t.Fatalf("jobs[%d]: spec %+v, want its own name and label, and the flags' label and cpu", i, s)
		}
	}
	if out, _, err := runCLI(t, "wait", "--config", config, "--label", "sweep=lr"); err != nil || strings.Count(out, " succeeded") != 3 {
		t.Fatalf("wait --label sweep=lr: %v\n%s", err, out)
	}
	// The sweep's outputs, each job's under its id.
	results := t.TempDir()
	if out, errOut, err := runCLI(t, "results", "--config", config, "--label", "sweep=lr", "--dir", results); err != nil || strings.Count(out, "1 files of ") != 3 {
		t.Fatalf("results --label sweep=lr: %v\n%s%s", err, out, errOut)
	}
	for i, lr := range []string{"0.1", "0.01", "0.001"} {
		if b, err := os.ReadFile(filepath.Join(results, ids[i], "lr")); err != nil || string(b) != lr+"\n" {
			t.Fatalf("jobs[%d]'s outputs: %q, %v; want %s", i, b, err, lr)
		}
	}
	// Of two jobs, one unknown: the other's outputs all the same, exit 1.
	unknown := uuid.New().String()
	out, errOut, err = runCLI(t, "results", "--config", config, ids[0], unknown, "--dir", t.TempDir())
	if exitCode(err) != ExitGeneral || !strings.Contains(out, "1 files of "+ids[0]) || !strings.Contains(errOut, "job "+unknown+" not found") {
		t.Fatalf("results of a job and an unknown one: %v\n%s%s", err, out, errOut)
	}
	if _, _, err := runCLI(t, "results", "--config", config, unknown, uuid.New().String()); exitCode(err) != ExitNotFound {
		t.Fatalf("results of two unknown jobs: want exit %d, got %v", ExitNotFound, err)
	}
	// The workers that ran them, one per local pool, taking work.
	js, errOut, err := runCLI(t, "workers", "--config", config, "-o", "json")
	var live []queue.LiveWorker
	if err != nil || json.Unmarshal([]byte(js), &live) != nil {
		t.Fatalf("workers -o json: %v\n%s%s", err, js, errOut)
	}
	if len(live) != 2 || live[0].Pool != "local-cpu" || live[1].Pool != "local-cpu-spot" || live[0].PausedUntil != nil || time.Since(live[1].LastBeatAt) > time.Minute {
		t.Fatalf("workers -o json: want a worker of each local pool, taking work, got %+v", live)
	}
	// More jobs than one request of the API takes go in several, in order.
	var big strings.Builder
	big.WriteString("jobs:\n")
	for i := range httpapi.MaxBatchJobs + 1 {
		fmt.Fprintf(&big, "  - {name: n-%d, command: [\"gpuq:noop\"]}\n", i)
	}
	js, errOut, err = runCLI(t, "submit", "--config", config, "--batch", writeBatch(t, big.String()), "--label", "sweep=big", "-o", "json")
	if err != nil {
		t.Fatalf("submit --batch of %d jobs: %v\n%s", httpapi.MaxBatchJobs+1, err, errOut)
	}
	var page struct {
		Jobs []queue.Job `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(js), &page); err != nil || len(page.Jobs) != httpapi.MaxBatchJobs+1 {
		t.Fatalf("submit --batch -o json: %v, %d jobs", err, len(page.Jobs))
	}
	seen := map[uuid.UUID]bool{}
	for i, j := range page.Jobs {
		if j.Name != fmt.Sprintf("n-%d", i) || seen[j.ID] || j.State == queue.StatePending {
			t.Fatalf("jobs[%d]: %s %s %s, want n-%d, a job of its own, accepted", i, j.ID, j.Name, j.State, i)
		}
		seen[j.ID] = true
	}
	// Submitted again with the same keys: the same jobs, nothing new.
	again, errOut, err := runCLI(t, "submit", "--config", config, "--batch", path, "--label", "sweep=lr", "--cpu", "1")
	if err != nil || strings.Fields(again)[0] != ids[0] || len(strings.Fields(again)) != 3 || strings.Fields(again)[2] != ids[2] {
		t.Fatalf("the batch submitted again: %v, got\n%s\nwant %v\n%s", err, again, ids, errOut)
	}
}

// Over NATS, as a submitter credential reaches the control plane: every job
// of the batch is submitted and its id printed in the batch's order; a job
// no pool can take is named on stderr and the command exits 2, the others
// going on.
func TestSubmitBatchOverNATSNamesTheRejectedJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes")
	}
	t.Parallel()
	bin := buildGpuq(t)
	natsURL, cred := startDevNATS(t, bin)
	home := t.TempDir()
	path := filepath.Join(home, "sweep.json")
	if err := os.WriteFile(path, []byte(`{"jobs": [
		{"name": "one", "command": ["true"]},
		{"name": "nowhere", "command": ["true"], "placement": {"residency": "CH"}},
		{"name": "three", "command": ["true"], "after_ended": ["one", "nowhere"]}
	]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out := string(runBinary(t, bin, home, clientEnv(natsURL, cred), ExitRejected, "submit", "--batch", path, "--label", "sweep=nats"))
	var ids []string
	for _, l := range strings.Split(out, "\n") {
		if _, err := uuid.Parse(l); err == nil {
			ids = append(ids, l)
		}
	}
	if len(ids) != 3 || !strings.Contains(out, "gpuq: jobs[1] ("+ids[1]+") rejected: ") || !strings.Contains(out, "1 of 3 jobs rejected") {
		t.Fatalf("submit --batch: want three ids and jobs[1] named as rejected, got\n%s", out)
	}
	st := string(runBinary(t, bin, home, clientEnv(natsURL, cred), 0, "status", ids[1]))
	if !strings.Contains(st, "state      rejected") {
		t.Fatalf("jobs[1]: %s", st)
	}
	for _, i := range []int{0, 2} {
		if got := string(runBinary(t, bin, home, clientEnv(natsURL, cred), 0, "wait", ids[i])); !strings.Contains(got, ids[i]+" succeeded") {
			t.Fatalf("jobs[%d]: %s", i, got)
		}
	}
	// three named the two before it by name: their ids stand in its spec,
	// and it ran once both had ended, the rejected one too.
	if st := string(runBinary(t, bin, home, clientEnv(natsURL, cred), 0, "status", ids[2])); !strings.Contains(st, "\nafter end  "+ids[0]+" (one) succeeded\nafter end  "+ids[1]+" (nowhere) rejected\n") {
		t.Fatalf("jobs[2], after the two before it: %s", st)
	}
	// The live workers, through the control plane's client service.
	if got := string(runBinary(t, bin, home, clientEnv(natsURL, cred), 0, "workers", "--pool", "local-cpu-spot")); !strings.Contains(got, "WORKER") ||
		strings.Count(got, " local-cpu-spot ") != 1 || strings.Contains(got, " local-cpu ") {
		t.Fatalf("workers --pool local-cpu-spot: want its one worker, got\n%s", got)
	}
}

// readmeBatch writes the README's batch file name (its yaml block that
// starts "# name") into the directory of a gpuq dev it starts, and returns
// the file's path, that directory and a runner of gpuq commands against it.
func readmeBatch(t *testing.T, name string) (path, dir string, gpuq func(args ...string) string) {
	t.Helper()
	m := regexp.MustCompile("(?s)```yaml\n# " + regexp.QuoteMeta(name) + "\n(.*?)```").FindStringSubmatch(readme(t))
	if m == nil {
		t.Fatalf("README.md has no %s", name)
	}
	dir, config := startDevHere(t)
	path = filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(m[1]), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, dir, func(args ...string) string {
		t.Helper()
		out, errOut, err := runCLI(t, append(args, "--config", config)...)
		if err != nil {
			t.Fatalf("gpuq %v: %v\n%s%s", args, err, out, errOut)
		}
		return out
	}
}

// The README's sweep runs as written: its batch file, then its commands
// against gpuq dev.
func TestTheReadmesSweepRunsAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes")
	}
	t.Parallel()
	path, dir, gpuq := readmeBatch(t, "sweep.yaml")
	ids := strings.Fields(gpuq("submit", "--batch", path, "--label", "sweep=lr"))
	if len(ids) != 3 {
		t.Fatalf("submit --batch: want three ids, got %v", ids)
	}
	if out := gpuq("wait", "--label", "sweep=lr"); strings.Count(out, " succeeded") != 3 {
		t.Fatalf("wait --label: %s", out)
	}
	// How far the sweep has come, over the HTTP API and over NATS (the
	// config file's connection, chosen by --nats-url on the command line).
	counted := gpuq("ls", "--label", "sweep=lr", "--count")
	for _, line := range []string{`succeeded\s+3`, `total\s+3`, `3 of 3 finished`} {
		if !regexp.MustCompile(`(?m)^` + line + `$`).MatchString(counted) {
			t.Fatalf("ls --label sweep=lr --count: no line %q in\n%s", line, counted)
		}
	}
	conf, err := os.ReadFile(filepath.Join(dir, devConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	natsURL := regexp.MustCompile(`(?m)^nats-url: (\S+)$`).FindSubmatch(conf)
	if natsURL == nil {
		t.Fatalf("%s names no nats-url:\n%s", devConfigFile, conf)
	}
	for _, conn := range [][]string{nil, {"--nats-url", string(natsURL[1])}} {
		var c queue.JobCounts
		if out := gpuq(append([]string{"ls", "--label", "sweep=lr", "--count", "-o", "json"}, conn...)...); json.Unmarshal([]byte(out), &c) != nil ||
			c.Total != 3 || c.States[queue.StateSucceeded] != 3 || len(c.States) != len(queue.States) {
			t.Fatalf("ls --count -o json %v: %s", conn, out)
		}
		// gpuq dev places them on its spot pool, none on its on-demand one.
		for pool, want := range map[string]int64{"local-cpu-spot": 3, "local-cpu": 0} {
			c = queue.JobCounts{}
			if out := gpuq(append([]string{"ls", "--label", "sweep=lr", "--pool", pool, "--count", "-o", "json"}, conn...)...); json.Unmarshal([]byte(out), &c) != nil || c.Total != want {
				t.Fatalf("ls --pool %s --count %v: %s, want %d jobs", pool, conn, out, want)
			}
			if out := gpuq(append([]string{"ls", "--label", "sweep=lr", "--pool", pool, "-o", "json"}, conn...)...); strings.Count(out, `"id"`) != int(want) {
				t.Fatalf("ls --pool %s %v: %s, want %d jobs", pool, conn, out, want)
			}
		}
	}
	results := filepath.Join(dir, "sweep")
	gpuq("results", "--label", "sweep=lr", "--dir", results)
	// By the jobs' names instead: sweep.yaml names them lr-0.1, lr-0.01 and
	// lr-0.001.
	named := filepath.Join(dir, "sweep-by-name")
	gpuq("results", "--label", "sweep=lr", "--dir", named, "--by-name")
	for i, lr := range []string{"0.1", "0.01", "0.001"} {
		if b, err := os.ReadFile(filepath.Join(results, ids[i], "result.txt")); err != nil || string(b) != "lr "+lr+"\n" {
			t.Fatalf("%s/%s/result.txt: %q, %v", results, ids[i], b, err)
		}
		if b, err := os.ReadFile(filepath.Join(named, "lr-"+lr, "result.txt")); err != nil || string(b) != "lr "+lr+"\n" {
			t.Fatalf("%s/lr-%s/result.txt: %q, %v", named, lr, b, err)
		}
	}

	// The same sweep without a file, as the README's --sweep line runs it
	// in gpuq dev's directory.
	line := regexp.MustCompile(`(?m)^\./bin/gpuq submit --sweep .*$`).FindString(readme(t))
	if line == "" {
		t.Fatal("README.md has no gpuq submit --sweep line")
	}
	sh := exec.Command("sh", "-c", strings.Replace(line, "./bin/gpuq", buildGpuq(t), 1))
	sh.Dir = dir
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	ids = strings.Fields(string(out))
	if len(ids) != 3 {
		t.Fatalf("%s: want three ids, got %q", line, out)
	}
	gpuq("wait", "--label", "sweep=lr2")
	for i, lr := range []string{"0.1", "0.01", "0.001"} {
		if ls := gpuq("ls", "--label", "lr="+lr, "-o", "json"); !strings.Contains(ls, ids[i]) || strings.Count(ls, `"id"`) != 1 {
			t.Fatalf("ls --label lr=%s: want the job %s alone, got %s", lr, ids[i], ls)
		}
		res := filepath.Join(dir, "sweep2-"+lr)
		gpuq("results", ids[i], "--dir", res)
		if b, err := os.ReadFile(filepath.Join(res, "result.txt")); err != nil || string(b) != "lr "+lr+"\n" {
			t.Fatalf("the --sweep run of lr %s: result.txt %q, %v", lr, b, err)
		}
	}
}

// A --sweep that cannot be what its author meant is refused before
// anything is submitted, naming the flag; a sweep's jobs get the values in
// their command, env, name, labels and idempotency key.
func TestSubmitSweepPutsEachValueInItsJobAndRefusesWhatItCannotMean(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"no key":           {[]string{"--sweep", "=1,2", "--", "echo"}, `--sweep "=1,2": want KEY=V1,V2,…`},
		"no values":        {[]string{"--sweep", "lr", "--", "echo", "{lr}"}, `--sweep "lr": want KEY=V1,V2,…`},
		"a bad key":        {[]string{"--sweep", "l r=1", "--", "echo", "{l r}"}, `--sweep "l r=1": want KEY=V1,V2,…`},
		"an empty value":   {[]string{"--sweep", "lr=0.1,", "--", "echo", "{lr}"}, "--sweep lr: value 2 is empty"},
		"a value twice":    {[]string{"--sweep", "lr=1,2,1", "--", "echo", "{lr}"}, `--sweep lr: "1" is given twice`},
		"a key twice":      {[]string{"--sweep", "lr=1", "--sweep", "lr=2", "--", "echo", "{lr}"}, "--sweep lr: given twice"},
		"a key not used":   {[]string{"--sweep", "lr=1,2", "--", "echo", "{rate}"}, "--sweep lr: neither the command nor an env value holds {lr}"},
		"too many":         {[]string{"--sweep", "a=" + sweepValues(101), "--sweep", "b=" + sweepValues(100), "--", "echo", "{a}{b}"}, "--sweep: 10100 jobs or more, more than the 10000"},
		"with a batch":     {[]string{"--sweep", "lr=1,2", "--batch", "jobs.yaml"}, "--sweep and --batch: give one"},
		"with follow":      {[]string{"--sweep", "lr=1,2", "--follow", "--", "echo", "{lr}"}, "--follow prints one job's output: a sweep takes --wait"},
		"a label too long": {[]string{"--sweep", "lr=1," + strings.Repeat("9", 300), "--", "echo", "{lr}"}, "jobs[1] (lr=" + strings.Repeat("9", 300) + "): invalid job spec: spec.labels.lr: must be at most 256 characters"},
	} {
		// An unreachable server: nothing can have been published.
		args := append([]string{"submit", "--nats-url", "nats://127.0.0.1:1"}, c.args...)
		if _, _, err := runCLI(t, args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want an error containing %q, got %v", name, c.want, err)
		}
	}

	base, err := queue.ParseSpec([]byte("name: train-{lr}\ncommand: [python, train.py, --lr, \"{lr}\", --bs, \"{bs}\"]\nenv: {RUN: \"lr{lr}-bs{bs}\"}\nlabels: {team: ml}\nidempotency_key: run7\n"))
	if err != nil {
		t.Fatal(err)
	}
	axes, err := parseSweeps([]string{"lr=0.1,0.01", "bs=32,64"})
	if err != nil {
		t.Fatal(err)
	}
	specs, err := sweepSpecs(base, axes, false)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range specs {
		got = append(got, fmt.Sprintf("%s|%s|%s|%v|%s", s.Name, strings.Join(s.Command, " "), s.Env["RUN"], s.Labels, s.IdempotencyKey))
	}
	want := []string{
		"train-0.1|python train.py --lr 0.1 --bs 32|lr0.1-bs32|map[bs:32 lr:0.1 team:ml]|run7 lr=0.1 bs=32",
		"train-0.1|python train.py --lr 0.1 --bs 64|lr0.1-bs64|map[bs:64 lr:0.1 team:ml]|run7 lr=0.1 bs=64",
		"train-0.01|python train.py --lr 0.01 --bs 32|lr0.01-bs32|map[bs:32 lr:0.01 team:ml]|run7 lr=0.01 bs=32",
		"train-0.01|python train.py --lr 0.01 --bs 64|lr0.01-bs64|map[bs:64 lr:0.01 team:ml]|run7 lr=0.01 bs=64",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the sweep's specs:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if base.Command[3] != "{lr}" || len(base.Labels) != 1 || base.Env["RUN"] != "lr{lr}-bs{bs}" {
		t.Fatalf("the base spec was changed: %+v", base)
	}
	// A name without {KEY} gets the values appended.
	base.Name = "train"
	if specs, err = sweepSpecs(base, axes[:1], false); err != nil || specs[1].Name != "train lr=0.01" {
		t.Fatalf("a name without {lr}: %v, %v", specs, err)
	}
}

// sweepValues is n distinct --sweep values, separated by commas.
func sweepValues(n int) string {
	vals := make([]string, n)
	for i := range vals {
		vals[i] = strconv.Itoa(i)
	}
	return strings.Join(vals, ",")
}
