package queue

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseSpecRefusesBadInputNamingTheField(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, spec, field, msg string
	}{
		{"unknown field", "command: [echo]\nresources: {gpus: 1}\n", "spec.resources.gpus", "unknown field; allowed: gpu, cpu, memory_gb (did you mean gpu?)"},
		{"unknown top-level field", "command: [echo]\ncomand: [x]\n", "spec.comand", "unknown field; allowed: name, project, command,"},
		{"a typo of a field is named", "command: [echo]\ncomand: [x]\n", "spec.comand", "after_ended (did you mean command?)"},
		{"another tool's word for a field is named", "command: [echo]\nretry: {max_errors: 1}\n", "spec.retry", "(did you mean retries?)"},
		{"wrong type", "command: [echo]\nresources: {cpu: two}\n", "spec.resources.cpu", "must be an integer, got a string"},
		{"wrong type in list", "command: [echo, 3]\n", "spec.command[1]", "must be a string"},
		{"gpu count 0", "command: [echo]\nresources: {gpu: {count: 0}}\n", "spec.resources.gpu.count", "must be 1–16, got 0"},
		{"gpu count 17", "command: [echo]\nresources: {gpu: {count: 17}}\n", "spec.resources.gpu.count", "must be 1–16, got 17"},
		{"empty command", "name: x\ncommand: []\n", "spec.command", "must not be empty"},
		{"missing command", "name: x\n", "spec.command", "must not be empty"},
		{"bad tier", "command: [echo]\nplacement: {tier: cheap}\n", "spec.placement.tier", "must be spot, on-demand or spot-then-on-demand"},
		{"bad duration", "command: [echo]\ntimeout: soon\n", "spec.timeout", "must be a duration"},
		{"bad money", "command: [echo]\nbudget: {max_price_per_hour: cheap}\n", "spec.budget.max_price_per_hour", "must be an amount and a currency"},
		{"money without a currency", "command: [echo]\nbudget: {max_price_per_hour: \"2.50\"}\n", "spec.budget.max_price_per_hour", `must be an amount and a currency such as "2.50 EUR", got "2.50"`},
		{"money with a bad amount", "command: [echo]\nbudget: {total: \"lots EUR\"}\n", "spec.budget.total", `must be an amount and a currency such as "100 EUR": "lots EUR": amount "lots" is not a non-negative decimal number`},
		{"reserved env", "command: [echo]\nenv: {GPUQ_JOB_ID: x}\n", "spec.env.GPUQ_JOB_ID", "set by the worker"},
		{"escaping checkpoint path", "command: [echo]\ncheckpoint: {paths: [../x]}\n", "spec.checkpoint.paths[0]", "relative path"},
		{"bad project", "command: [echo]\nproject: My Project\n", "spec.project", "lower-case"},
		{"not a mapping", "- a\n- b\n", "spec", "must be a mapping"},
		{"negative retries", "command: [echo]\nretries: {max_errors: -1}\n", "spec.retries.max_errors", "must be 0–100"},
		{"unknown built-in", "command: [\"gpuq:sleep\"]\n", "spec.command", "not a built-in job"},
		{"built-in with arguments", "command: [\"gpuq:noop\", x]\n", "spec.command", "without arguments"},
		{"oversize", "command: [echo]\nenv: {A: \"" + strings.Repeat("x", 10<<20) + "\"}\n", "spec", "over the 262144-byte limit"},
		{"unknown card", "command: [echo]\nresources: {gpu: {count: 1, cards: [H100, X100]}}\n", "spec.resources.gpu.cards[1]", `unknown card "X100"; known families: A10, A100,`},
		{"input country", "command: [echo]\ninputs: [{region: r, bytes: 1, country: Germany}]\n", "spec.inputs[0].country", `want an ISO 3166-1 alpha-2 code such as DE, got "Germany"`},
		{"checkpoint interval under a second", "command: [echo]\ncheckpoint: {interval: 500ms}\n", "spec.checkpoint.interval", "must be 0 (none) or at least 1s, got 500ms"},
		{"long name", "command: [echo]\nname: " + strings.Repeat("é", 129) + "\n", "spec.name", "must be at most 128 characters, got 129"},
		{"long label", "command: [echo]\nlabels: {team: " + strings.Repeat("ü", 257) + "}\n", "spec.labels.team", "must be at most 256 characters, got 257"},
		{"workdir as a local path", "command: [python3, train.py]\nworkdir: ./src\n", "spec.workdir", `must name an uploaded directory as "sha256:" and 64 hex digits (gpuq submit --workdir DIR and the Python client's workdir= upload one and fill it in), got "./src"`},
		{"workdir with upper-case digits", "command: [echo]\nworkdir: sha256:" + strings.Repeat("AB", 32) + "\n", "spec.workdir", `must name an uploaded directory`},
		{"workdir digest too short", "command: [echo]\nworkdir: sha256:abc\n", "spec.workdir", `must name an uploaded directory`},
		{"workdir of the built-in", "command: [\"gpuq:noop\"]\nworkdir: sha256:" + strings.Repeat("ab", 32) + "\n", "spec.workdir", "runs no command"},
		{"secret not a variable name", "command: [echo]\nsecrets: [wandb-key]\n", "spec.secrets[0]", `must be an environment variable's name: a letter or '_', then letters, digits or '_', got "wandb-key"`},
		{"secret of the worker's", "command: [echo]\nsecrets: [GPUQ_TOKEN]\n", "spec.secrets[0]", "GPUQ_* variables are set by the worker, got GPUQ_TOKEN"},
		{"secret named twice", "command: [echo]\nsecrets: [HF_TOKEN, HF_TOKEN]\n", "spec.secrets[1]", "HF_TOKEN is named twice"},
		{"secret also in env", "command: [echo]\nenv: {HF_TOKEN: x}\nsecrets: [HF_TOKEN]\n", "spec.secrets[0]", "HF_TOKEN is also in env: a variable comes from one of them"},
		{"notify without a webhook", "command: [echo]\nnotify: {when: [failed]}\n", "spec.notify.webhook", "must name a secret of the project holding the webhook's URL (gpuq secret set --project default NAME)"},
		{"notify webhook not a secret name", "command: [echo]\nnotify: {webhook: https://hooks.slack.com/x}\n", "spec.notify.webhook", "must be an environment variable's name"},
		{"notify when not an end", "command: [echo]\nnotify: {webhook: HOOK, when: [running]}\n", "spec.notify.when[0]", `must be an end: one of succeeded, failed, dead, cancelled, rejected, got "running"`},
		{"notify when twice", "command: [echo]\nnotify: {webhook: HOOK, when: [failed, dead, failed]}\n", "spec.notify.when[2]", "failed is named twice"},
		{"notify when too long", "command: [echo]\nnotify: {webhook: HOOK, when: [failed, failed, failed, failed, failed, failed]}\n", "spec.notify.when", "must name at most the 5 ends"},
		{"notify log lines over", "command: [echo]\nnotify: {webhook: HOOK, log_lines: 51}\n", "spec.notify.log_lines", "must be 0–50, got 51"},
		{"notify log lines negative", "command: [echo]\nnotify: {webhook: HOOK, log_lines: -1}\n", "spec.notify.log_lines", "must be 0–50, got -1"},
		{"notify log lines of a job kept in a residency", "command: [echo]\nplacement: {residency: EU}\nnotify: {webhook: HOOK, log_lines: 5}\n", "spec.notify.log_lines",
			"the job is kept in residency EU (spec.placement.residency), and its output would leave it for the webhook's service"},
		{"notify on, read by YAML as true", "command: [echo]\nnotify: {webhook: HOOK, on: [failed]}\n", "spec.notify.true", `unknown field; allowed: webhook, when, log_lines (YAML reads a key "on", "off", "yes" or "no" as true)`},
		{"secret of the built-in", "command: [\"gpuq:noop\"]\nsecrets: [HF_TOKEN]\n", "spec.secrets[0]", "takes no secrets"},
		{"after not a job id", "command: [echo]\nafter: [train]\n", "spec.after[0]", `must be a job id as gpuq prints it (8-4-4-4-12 lower-case hex digits, such as 0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70), got "train"`},
		{"after in upper case", "command: [echo]\nafter: [0190F3C2-7A1E-7D4B-9C1A-2B3C4D5E6F70]\n", "spec.after[0]", "must be a job id as gpuq prints it"},
		{"after named twice", "command: [echo]\nafter: [0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70, 0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70]\n", "spec.after[1]", "0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70 is named twice"},
		{"after not a list", "command: [echo]\nafter: 0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70\n", "spec.after", "must be a list"},
		{"after too long", "command: [echo]\nafter: [" + strings.TrimSuffix(strings.Repeat("0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70, ", 1001), ", ") + "]\n", "spec.after", "must name at most 1000 jobs, got 1001"},
		{"after_ended not a job id", "command: [echo]\nafter_ended: [lr-0]\n", "spec.after_ended[0]", `must be a job id as gpuq prints it`},
		{"after_ended named in after too", "command: [echo]\nafter: [0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70]\nafter_ended: [0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70]\n", "spec.after_ended[0]", "0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70 is in spec.after too: a job runs after another either once it has succeeded or once it has ended"},
		{"after_ended named twice", "command: [echo]\nafter_ended: [0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70, 0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70]\n", "spec.after_ended[1]", "is named twice"},
		{"after and after_ended too long", "command: [echo]\nafter: [0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70]\nafter_ended: [" + strings.TrimSuffix(strings.Repeat("0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f71, ", 1000), ", ") + "]\n", "spec.after_ended", "must name at most 1000 jobs with spec.after, got 1001"},
		{"secrets not a list", "command: [echo]\nsecrets: HF_TOKEN\n", "spec.secrets", "must be a list, got a string"},
		{"secret name too long", "command: [echo]\nsecrets: [A" + strings.Repeat("B", 128) + "]\n", "spec.secrets[0]", "must be at most 128 characters, got 129"},
		{"too many secrets", "command: [echo]\nsecrets: [" + strings.TrimSuffix(strings.Repeat("S,", 65), ",") + "]\n", "spec.secrets", "must name at most 64 secrets, got 65"},
		{"allow_gpu_for_cpu type", "command: [echo]\nplacement: {allow_gpu_for_cpu: yes please}\n", "spec.placement.allow_gpu_for_cpu", "must be true or false"},
		{"input job not an id", "command: [echo]\ninputs: [{job: prep}]\n", "spec.inputs[0].job", "must be a job id as gpuq prints it"},
		{"input job with a region", "command: [echo]\ninputs: [{job: 0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70, region: eu-west-1}]\n", "spec.inputs[0].region", "must be left out with job: gpuq knows where the job's outputs are stored"},
		{"input job with bytes", "command: [echo]\ninputs: [{job: 0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70, bytes: 10}]\n", "spec.inputs[0].bytes", "must be left out with job"},
		{"input job named twice", "command: [echo]\ninputs: [{name: a, job: 0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70}, {name: b, job: 0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70}]\n", "spec.inputs[1].job", "is named twice"},
		{"input name twice", "command: [echo]\ninputs: [{name: a, job: 0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70}, {name: a, job: 0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f71}]\n", "spec.inputs[1].name", "a names another input too"},
		{"input name a path", "command: [echo]\ninputs: [{name: ../up, job: 0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70}]\n", "spec.inputs[0].name", "$GPUQ_INPUT_DIR/<name>"},
		{"input name a dot", "command: [echo]\ninputs: [{name: ., job: 0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70}]\n", "spec.inputs[0].name", "starting with a letter or digit"},
		{"input of the noop job", "command: [\"gpuq:noop\"]\ninputs: [{job: 0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70}]\n", "spec.inputs[0].job", "reads no job's outputs"},
		{"input job not a string", "command: [echo]\ninputs: [{job: 3}]\n", "spec.inputs[0].job", "must be a string"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseSpec([]byte(c.spec))
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("want a SpecError, got %v", err)
			}
			if !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("errors.Is(err, ErrInvalidSpec) = false")
			}
			for _, p := range se.Problems {
				if p.Field == c.field && strings.Contains(p.Message, c.msg) {
					return
				}
			}
			t.Fatalf("want a problem at %s containing %q, got %v", c.field, c.msg, err)
		})
	}
}

// Lengths are counted in characters, as the limits say: a name in any
// script may be as long as an ASCII one.
func TestParseSpecCountsLengthsInCharacters(t *testing.T) {
	t.Parallel()
	spec := "command: [echo]\nname: " + strings.Repeat("é", 128) + "\nidempotency_key: " + strings.Repeat("日", 256) +
		"\nlabels: {" + strings.Repeat("ß", 63) + ": " + strings.Repeat("ü", 256) + "}\n"
	s, err := ParseSpec([]byte(spec))
	if err != nil {
		t.Fatalf("a spec at every limit in characters must be accepted: %v", err)
	}
	if s.Name != strings.Repeat("é", 128) {
		t.Fatalf("name: %q", s.Name)
	}
	if _, _, err := NewTokenSecret(strings.Repeat("é", 200), []string{"p"}, RoleRead, nil); err != nil {
		t.Fatalf("a token name of 200 characters must be accepted: %v", err)
	}
	if _, _, err := NewTokenSecret(strings.Repeat("é", 201), []string{"p"}, RoleRead, nil); err == nil || !strings.Contains(err.Error(), "got 201") {
		t.Fatalf("a token name of 201 characters must be refused counting characters: %v", err)
	}
}

func TestParseSpecAcceptsAFullSpecAndAppliesDefaults(t *testing.T) {
	t.Parallel()
	spec, err := ParseSpec([]byte(`
name: train-resnet
project: vision
command: [python, train.py, --epochs, "90"]
env: {WANDB_MODE: offline}
resources:
  gpu: {count: 1, cards: [H100, A100-80GB], memory_gb: 80}
  cpu: 8
  memory_gb: 64
placement: {tier: spot, regions: ["eu-*"], residency: EU, providers: [local], allow_gpu_for_cpu: true}
budget: {max_price_per_hour: "2.50 EUR", total: "100 EUR"}
retries: {max_errors: 1, max_preemptions: 50, delay: 30s}
checkpoint: {paths: [ckpt], interval: 10m}
idempotency_key: resnet-run-7
labels: {team: vision}
timeout: 12h
deadline: 2026-12-01T18:00:00Z
expected_duration: 6h
inputs: [{uri: "s3://bucket/imagenet", provider: aws, region: eu-central-1, country: de, bytes: 150000000000}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if in := spec.Inputs[0]; !spec.Placement.AllowGPUForCPU || in.Provider != "aws" || in.Country != "de" {
		t.Fatalf("placement fields not decoded: %+v", spec)
	}
	if spec.Resources.GPU.Count != 1 || spec.Placement.Residency != "EU" || spec.MaxErrors() != 1 || spec.RetryDelay() != 30*time.Second {
		t.Fatalf("fields not decoded: %+v", spec)
	}
	if time.Duration(spec.Timeout) != 12*time.Hour || spec.Deadline == nil {
		t.Fatalf("durations/times not decoded: %+v", spec)
	}
	def, err := ParseSpec([]byte(`{"command": "echo hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	if def.Project != DefaultProject || def.Placement.Tier != DefaultTier || def.MaxErrors() != DefaultMaxErrors || def.MaxPreemptions() != DefaultMaxPreemptions {
		t.Fatalf("defaults not applied: %+v", def)
	}
	if strings.Join(def.Command, " ") != "/bin/sh -c echo hi" {
		t.Fatalf("a string command runs through the shell, got %q", def.Command)
	}
}

func TestNoopIsTheOnlyBuiltInCommand(t *testing.T) {
	t.Parallel()
	cases := []struct {
		spec string
		noop bool
	}{
		{`command: ["gpuq:noop"]`, true},
		{`command: "gpuq:noop"`, false}, // a shell string runs /bin/sh, which has no built-ins
		{`command: [/bin/true]`, false},
		{`command: [echo, "gpuq:noop"]`, false},
	}
	for _, c := range cases {
		spec, err := ParseSpec([]byte(c.spec))
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if spec.IsNoop() != c.noop {
			t.Errorf("%s: IsNoop() = %v, want %v", c.spec, spec.IsNoop(), c.noop)
		}
	}
}

func TestJobIDForIdempotencyKeyIsStablePerProject(t *testing.T) {
	t.Parallel()
	a := &Spec{Project: "p", IdempotencyKey: "k"}
	b := &Spec{Project: "p", IdempotencyKey: "k"}
	c := &Spec{Project: "q", IdempotencyKey: "k"}
	if JobIDFor(a) != JobIDFor(b) {
		t.Fatal("the same key in the same project must name the same job")
	}
	if JobIDFor(a) == JobIDFor(c) {
		t.Fatal("the same key in another project must name another job")
	}
	first, second := JobIDFor(&Spec{Project: "p"}), JobIDFor(&Spec{Project: "p"})
	if first == second {
		t.Fatal("submissions without a key must get fresh ids")
	}
}

// BenchmarkParseSpecJSON parses what queue.Submit publishes: the
// scheduler parses every submission this way.
func BenchmarkParseSpecJSON(b *testing.B) {
	for name, spec := range map[string]string{
		"noop": `{"name":"bench","project":"bench","command":["gpuq:noop"]}`,
		"training": `{"name":"resnet-sweep-17","project":"vision","command":["python","train.py","--lr","0.01"],` +
			`"env":{"EPOCHS":"90","SEED":"17"},"resources":{"gpu":{"count":1,"cards":["A100"]},"cpu":8,"memory_gb":64},` +
			`"placement":{"tier":"spot-then-on-demand","residency":"eu"},"checkpoint":{"paths":["model.pt"],"interval":"10m"},` +
			`"retries":{"max_errors":3},"deadline":"2026-12-24T18:00:00Z","expected_duration":"6h"}`,
	} {
		if _, err := ParseSpec([]byte(spec)); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseSpec([]byte(spec)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestIsPlainKeyAcceptsWhatThePlainKeyPatternDoes(t *testing.T) {
	t.Parallel()
	plainKey := regexp.MustCompile(`^[A-Za-z0-9_&*./: -]*$`)
	alphabet := []rune("aZ09_&*./: -\"'\\\t\n\x00\x7fé→{}[]#")
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		k := make([]rune, r.IntN(6))
		for i := range k {
			k[i] = alphabet[r.IntN(len(alphabet))]
		}
		if got, want := isPlainKey(string(k)), plainKey.MatchString(string(k)); got != want {
			t.Fatalf("isPlainKey(%q) = %v, want %v", string(k), got, want)
		}
	}
	if keyName("a\nb") != `"a\nb"` || keyName("resources.gpu") != "resources.gpu" {
		t.Fatalf("keyName: %q, %q", keyName("a\nb"), keyName("resources.gpu"))
	}
}

func TestAWorkdirDigestIsKeptAndItsPoolCopyNamed(t *testing.T) {
	t.Parallel()
	sum := strings.Repeat("0f", 32)
	spec, err := ParseSpec([]byte("command: [python3, train.py]\nworkdir: sha256:" + sum + "\n"))
	if err != nil || spec.Workdir != "sha256:"+sum {
		t.Fatalf("spec %+v, err %v", spec, err)
	}
	uri := ArchiveScheme + ArchiveBucket("de-cpu") + "/" + WorkdirPoolObject("vision", sum)
	if project, got, ok := WorkdirPoolCopy(uri); !ok || project != "vision" || got != sum {
		t.Fatalf("WorkdirPoolCopy(%s) = %q, %q, %v", uri, project, got, ok)
	}
	for _, other := range []string{
		ArchiveScheme + ArchiveBucket("de-cpu") + "/jobs/" + sum + "/outputs-a1.tar.zst",
		ArchiveScheme + WorkdirBucket + "/" + WorkdirObject("vision", sum),
		ArchiveScheme + ArchiveBucket("de-cpu") + "/workdirs/Vision/" + sum + ".tar.gz",
		ArchiveScheme + ArchiveBucket("de-cpu") + "/workdirs/vision/" + sum[:60] + ".tar.gz",
	} {
		if _, _, ok := WorkdirPoolCopy(other); ok {
			t.Errorf("WorkdirPoolCopy(%s) took it for a working directory's copy", other)
		}
	}
}

// An input from a job names the job in spec.after unless spec.after or
// spec.after_ended holds it already, and is named by the job's id unless
// it has a name; inputs of data a store holds are left as they are.
func TestAnInputFromAJobRunsTheJobAfterIt(t *testing.T) {
	t.Parallel()
	const a, b, c = "0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70", "0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f71", "0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f72"
	s, err := ParseSpec([]byte("command: [echo]\nafter: [" + b + "]\nafter_ended: [" + c + "]\ninputs:\n" +
		"  - {job: " + a + "}\n  - {name: model, job: " + b + "}\n  - {name: runs, job: " + c + "}\n" +
		"  - {name: imagenet, uri: \"s3://bucket/imagenet\", region: eu-central-1, bytes: 100}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.After, []string{b, a}) || !slices.Equal(s.AfterEnded, []string{c}) {
		t.Fatalf("after %v, after_ended %v; want %s added to after alone", s.After, s.AfterEnded, a)
	}
	want := []Input{{Name: a, Job: a}, {Name: "model", Job: b}, {Name: "runs", Job: c}}
	if got := s.InputJobs(); !slices.Equal(got, want) {
		t.Fatalf("InputJobs() = %+v, want %+v", got, want)
	}
	if len(s.Inputs) != 4 || s.Inputs[3].Job != "" || s.Inputs[3].Region != "eu-central-1" {
		t.Fatalf("the data input: %+v", s.Inputs[3])
	}
	// The recorded form parses to the same spec: resubmitting it under an
	// idempotency key names the same job.
	recorded, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseSpec(recorded)
	if err != nil || !slices.Equal(again.After, s.After) || !slices.Equal(again.Inputs, s.Inputs) {
		t.Fatalf("the recorded spec parsed again: %+v, %v", again, err)
	}
}

// An unknown field's message ends with the fields it was likely meant to
// be, or with the fields allowed when none is like it.
func TestAnUnknownFieldNamesTheFieldsItWasLikelyMeantToBe(t *testing.T) {
	t.Parallel()
	const top = "unknown field; allowed: name, project, command, env, resources, placement, budget, retries, checkpoint, idempotency_key, labels, timeout, deadline, expected_duration, inputs, workdir, secrets, notify, after, after_ended"
	for spec, want := range map[string]FieldError{
		"command: [echo]\nimage: ubuntu\n":               {Field: "spec.image", Message: top},
		"command: [echo]\ncomand: [x]\n":                 {Field: "spec.comand", Message: top + " (did you mean command?)"},
		"command: [echo]\nafter-ended: []\n":             {Field: "spec.after-ended", Message: top + " (did you mean after or after_ended?)"},
		"command: [echo]\nplacement: {residncy: EU}\n":   {Field: "spec.placement.residncy", Message: "unknown field; allowed: tier, regions, residency, providers, allow_gpu_for_cpu (did you mean residency?)"},
		"command: [echo]\nresources: {gpu: {cout: 1}}\n": {Field: "spec.resources.gpu.cout", Message: "unknown field; allowed: count, cards, memory_gb (did you mean count?)"},
	} {
		_, err := ParseSpec([]byte(spec))
		var se *SpecError
		if !errors.As(err, &se) || len(se.Problems) != 1 || se.Problems[0] != want {
			t.Errorf("%q: got %v, want %s: %s", spec, err, want.Field, want.Message)
		}
	}
}
