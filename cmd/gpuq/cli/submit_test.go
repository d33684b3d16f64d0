package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/queue"
)

func TestSubmitRefusesABadSpecBeforeConnecting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := map[string]string{
		"unknown field": "command: [echo]\nresources: {gpus: 1}\n",
		"gpu count 0":   "command: [echo]\nresources: {gpu: {count: 0}}\n",
		"empty command": "name: x\ncommand: []\n",
	}
	want := map[string]string{
		"unknown field": "spec.resources.gpus: unknown field",
		"gpu count 0":   "spec.resources.gpu.count: must be 1–16, got 0",
		"empty command": "spec.command: must not be empty",
	}
	for name, spec := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
			t.Fatal(err)
		}
		// An unreachable server: a refused spec must fail before any
		// connection is attempted, so nothing can have been published.
		_, _, err := runCLI(t, "submit", "-f", path, "--nats-url", "nats://127.0.0.1:1")
		if err == nil || !strings.Contains(err.Error(), want[name]) {
			t.Errorf("%s: want an error containing %q, got %v", name, want[name], err)
		}
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("command: [echo]\nenv: {A: \""+strings.Repeat("x", 10<<20)+"\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(t, "submit", "-f", big, "--nats-url", "nats://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "byte limit") {
		t.Errorf("a 10 MB spec: want the size limit named, got %v", err)
	}
}

// submitSpec is the spec gpuq submit builds from args, without submitting.
func submitSpec(t *testing.T, args ...string) (*queue.Spec, error) {
	t.Helper()
	cmd := newSubmitCmd()
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	v, err := loadConfig(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return specFromFlags(cmd, v, cmd.Flags().Args(), newWorkdirs(cmd, v))
}

func TestSubmitsCardFlagAsksForOneGPUUnlessTheCountIsGiven(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	twoGPUs := filepath.Join(dir, "two.yaml")
	if err := os.WriteFile(twoGPUs, []byte("command: [train]\nresources: {gpu: {count: 2, cards: [A100]}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args  []string
		count int
		cards string
	}{
		{[]string{"--card", "V100", "--", "train"}, 1, "V100"},
		{[]string{"--card", "H100,A100", "--gpu-count", "4", "--", "train"}, 4, "H100,A100"},
		{[]string{"-f", twoGPUs, "--card", "H100"}, 2, "H100"},
	} {
		spec, err := submitSpec(t, tt.args...)
		if err != nil {
			t.Errorf("%v: %v", tt.args, err)
			continue
		}
		if g := spec.Resources.GPU; g == nil || g.Count != tt.count || strings.Join(g.Cards, ",") != tt.cards {
			t.Errorf("%v: resources.gpu = %+v, want %d of %s", tt.args, g, tt.count, tt.cards)
		}
	}
}

func TestSubmitTakesALoneSpecFileArgumentAsTheSpec(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(file, []byte("name: from-file\ncommand: [python, train.py]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	specOf := func(args ...string) (string, []string, error) {
		spec, err := submitSpec(t, args...)
		if err != nil {
			return "", nil, err
		}
		return spec.Name, spec.Command, nil
	}
	for _, tt := range []struct {
		args    []string
		name    string // "": the default, not checked here
		command string
	}{
		{[]string{file}, "from-file", "python train.py"},
		{[]string{file, "--name", "renamed"}, "renamed", "python train.py"},
		{[]string{"--", file}, "", file},
		{[]string{"cat", file}, "", "cat " + file},
		{[]string{"-f", file, "--", "python", "eval.py"}, "from-file", "python eval.py"},
	} {
		name, command, err := specOf(tt.args...)
		if err != nil {
			t.Errorf("%v: %v", tt.args, err)
			continue
		}
		if (tt.name != "" && name != tt.name) || strings.Join(command, " ") != tt.command {
			t.Errorf("%v: name %q, command %q; want %q, %q", tt.args, name, command, tt.name, tt.command)
		}
	}
	missing := filepath.Join(dir, "typo.yml")
	if _, _, err := specOf(missing); err == nil || !strings.Contains(err.Error(), "typo.yml") {
		t.Errorf("a missing spec file: want an error naming it, got %v", err)
	}
}

func TestSubmitSaysWhereTheCommandsOwnFlagsGo(t *testing.T) {
	t.Parallel()
	_, _, err := runCLI(t, "submit", "python", "train.py", "--epochs", "3", "--nats-url", "nats://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "unknown flag: --epochs") || !strings.Contains(err.Error(), "after --") {
		t.Fatalf("want the unknown flag named and where the command's flags go, got %v", err)
	}
	_, _, err = runCLI(t, "submit", "--gpu-count", "x", "--", "true")
	if err == nil || strings.Contains(err.Error(), "after --") {
		t.Fatalf("a bad value of submit's own flag needs no hint about the command: %v", err)
	}
}

// A spec file may hold what a series of jobs shares and leave the rest to
// the command line: its command, labels, environment. The completed spec is
// checked and defaulted as a whole, so the default name comes from the
// command given, and a mistake in the file is still named.
func TestSubmitCompletesAPartialSpecFileFromTheCommandLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	shared := write("shared.yaml", "retries: {max_errors: 1, delay: 1s}\nlabels: {sweep: lr}\nenv: {A: '1'}\ninputs:\n"+
		"  - {name: data, uri: 's3://b/d', provider: aws, region: eu-central-1, bytes: 9007199254740993}\n")
	spec, err := submitSpec(t, "-f", shared, "--label", "lr=0.1", "--env", "B=2", "--", "python", "train.py")
	if err != nil {
		t.Fatalf("a file without a command, the command after --: %v", err)
	}
	if strings.Join(spec.Command, " ") != "python train.py" || spec.Name != "train.py" || spec.MaxErrors() != 1 {
		t.Errorf("want the command given, the name from it and the file's retries; got %q %q %d", spec.Command, spec.Name, spec.MaxErrors())
	}
	if spec.Labels["sweep"] != "lr" || spec.Labels["lr"] != "0.1" || spec.Env["A"] != "1" || spec.Env["B"] != "2" {
		t.Errorf("want the file's labels and env with the flags' added, got %v %v", spec.Labels, spec.Env)
	}
	if len(spec.Inputs) != 1 || spec.Inputs[0].Bytes != 9007199254740993 {
		t.Errorf("want the input's bytes exactly as written, got %+v", spec.Inputs)
	}
	if _, err := submitSpec(t, "-f", shared); err == nil || !strings.Contains(err.Error(), "spec.command") {
		t.Errorf("the file alone: want the missing command named, got %v", err)
	}
	if _, err := submitSpec(t, "-f", shared, "--name", "x"); err == nil || !strings.Contains(err.Error(), "spec.command") {
		t.Errorf("the file and a flag, no command: want the missing command named, got %v", err)
	}
	typo := write("typo.yaml", "retries: {max_error: 1}\n")
	if _, err := submitSpec(t, "-f", typo, "--", "true"); err == nil || !strings.Contains(err.Error(), "spec.retries.max_error: unknown field") {
		t.Errorf("a file with an unknown field and a command: want the field named, got %v", err)
	}
	if _, err := submitSpec(t, "-f", write("list.yaml", "- a\n"), "--", "true"); err == nil || !strings.Contains(err.Error(), "must be a mapping") {
		t.Errorf("a file that is a list: want it refused, got %v", err)
	}
	if spec, err := submitSpec(t, "-f", write("empty.yaml", ""), "--", "true"); err != nil || spec.Name != "true" {
		t.Errorf("an empty file and a command: want the command's spec, got %v %v", spec, err)
	}
}

// An env entry whose name marks a credential (HF_TOKEN, WANDB_API_KEY,
// AWS_SECRET_ACCESS_KEY, DB_PASSWORD) is submitted as given, with a warning
// naming the secret that would keep it out of the spec, once per name
// however many jobs of a batch carry it; other names pass silently.
func TestAnEnvEntryNamedLikeACredentialIsSubmittedWithAWarningToKeepItInASecret(t *testing.T) {
	var w strings.Builder
	specs := []*queue.Spec{
		{Env: map[string]string{"HF_TOKEN": "x", "WANDB_MODE": "offline", "TOKENIZERS_PARALLELISM": "false"}},
		{Env: map[string]string{"HF_TOKEN": "x", "aws_secret_access_key": "y", "DB_PASSWORD": "z", "WANDB_API_KEY": "k", "MONKEY": "1"}},
	}
	warnCredentialEnv(&w, specs...)
	got := w.String()
	for _, name := range []string{"DB_PASSWORD", "HF_TOKEN", "WANDB_API_KEY", "aws_secret_access_key"} {
		if strings.Count(got, "gpuq: env "+name+" looks like a credential") != 1 {
			t.Errorf("want one warning for %s, got:\n%s", name, got)
		}
	}
	if !strings.Contains(got, "printenv HF_TOKEN | gpuq secret set HF_TOKEN, then --secret HF_TOKEN") {
		t.Errorf("want the way to a secret, got:\n%s", got)
	}
	for _, quiet := range []string{"WANDB_MODE", "TOKENIZERS_PARALLELISM", "MONKEY"} {
		if strings.Contains(got, quiet) {
			t.Errorf("%s is not a credential's name, got:\n%s", quiet, got)
		}
	}
}
