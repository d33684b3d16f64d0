package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/queue/store"
)

// A researcher keeps an API key on the control plane once and names it in
// the jobs that need it, as the README shows on gpuq dev: the value
// reaches the job's environment and nothing else a user or an operator
// reads — not the spec, gpuq status, the logs (masked) or gpuq dev's own
// output. A job naming a secret its project does not hold is refused over
// HTTP and rejected over NATS; one whose secret is deleted while it waits
// fails without running, and its retry is refused until the secret is set.
func TestASecretReachesItsJobsEnvironmentAndNothingUsersRead(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes")
	}
	t.Parallel()
	bin := buildGpuq(t)
	dir := t.TempDir()
	dev, natsEnv, httpEnv := startDevClients(t, bin, dir)
	gpuq := func(wantCode int, args ...string) string {
		t.Helper()
		return string(runBinary(t, bin, dir, httpEnv, wantCode, args...))
	}
	const value = "wandb-7f3a9c1e5d2b8a4f6e0c"

	// Piped in, as the README's printenv example: the trailing newline
	// is not part of the value.
	if out := string(runBinaryInput(t, bin, dir, httpEnv, value+"\n", 0, "secret", "set", "WANDB_API_KEY")); !strings.Contains(out, "secret WANDB_API_KEY of project default set") {
		t.Fatalf("secret set: %s", out)
	}
	// Sealed in the database with the key gpuq dev made in its data
	// directory.
	db, err := store.Open(context.Background(), dev.conn.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var stored string
	var sealed bool
	if err := db.DB.QueryRow("SELECT value, sealed FROM project_secrets WHERE name = 'WANDB_API_KEY'").Scan(&stored, &sealed); err != nil || !sealed || strings.Contains(stored, value) {
		t.Fatalf("the database holds %q (sealed %v, %v)", stored, sealed, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, ".gpuq", "secrets.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("gpuq dev's secrets key: %v, %v", fi, err)
	}
	if out := gpuq(0, "secret", "ls"); !strings.Contains(out, "WANDB_API_KEY") || strings.Contains(out, value) {
		t.Fatalf("secret ls: want the name and never the value, got %s", out)
	}
	var listed httpapi.Secrets
	if err := json.Unmarshal([]byte(gpuq(0, "secret", "ls", "-o", "json")), &listed); err != nil || len(listed.Secrets) != 1 || listed.Secrets[0].Name != "WANDB_API_KEY" {
		t.Fatalf("secret ls -o json: %+v, %v", listed, err)
	}

	out := gpuq(0, "submit", "--secret", "WANDB_API_KEY", "--wait", "--", "sh", "-c",
		`echo "key=$WANDB_API_KEY"; printf %s "$WANDB_API_KEY" > "$GPUQ_OUTPUT_DIR/key.txt"`)
	id := strings.Fields(out)[0]
	if !strings.Contains(out, id+" succeeded") {
		t.Fatalf("submit --secret --wait: %s", out)
	}
	results := filepath.Join(t.TempDir(), "out")
	gpuq(0, "results", id, "--dir", results)
	if b, err := os.ReadFile(filepath.Join(results, "key.txt")); err != nil || string(b) != value {
		t.Fatalf("the job's WANDB_API_KEY: %q, %v; want the value set", b, err)
	}
	if logs := gpuq(0, "logs", id); !strings.Contains(logs, "key=***") || strings.Contains(logs, value) {
		t.Fatalf("logs: want the value masked, got %s", logs)
	}
	if st := gpuq(0, "status", id); strings.Count(st, "\nsecrets ") != 1 || !strings.Contains(st, "\nsecrets    WANDB_API_KEY (values not shown)\n") || strings.Contains(st, value) {
		t.Fatalf("status: want the secret's name only, got %s", st)
	}
	var st control.JobStatus
	raw := gpuq(0, "status", id, "-o", "json")
	if err := json.Unmarshal([]byte(raw), &st); err != nil || len(st.Job.Spec.Secrets) != 1 || strings.Contains(raw, value) {
		t.Fatalf("status -o json: want the name in the spec and never the value: %v\n%s", err, raw)
	}

	// A secret is its project's: one of vision is not default's.
	runBinaryInput(t, bin, dir, httpEnv, "hf_token_of_vision", 0, "secret", "set", "--project", "vision", "HF_TOKEN")
	if out := gpuq(ExitGeneral, "submit", "--secret", "HF_TOKEN", "--", "true"); !strings.Contains(out, "spec.secrets[0]: secret HF_TOKEN is not set for project default") {
		t.Fatalf("a secret of another project: %s", out)
	}

	// Over NATS (from a directory without gpuq dev's config, whose API URL
	// would be taken) the scheduler rejects it: no pool, and no machine,
	// is taken for it.
	home := t.TempDir()
	missing := filepath.Join(home, "missing.json")
	if err := os.WriteFile(missing, []byte(`{"command": ["sh", "-c", "echo ran; test -n \"$HF_TOKEN\""], "secrets": ["HF_TOKEN"], "placement": {"tier": "spot"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := string(runBinary(t, bin, home, natsEnv, ExitRejected, "submit", missing)); !strings.Contains(out,
		"rejected: secret HF_TOKEN is not set for project default: set it (gpuq secret set --project default HF_TOKEN) and retry the job") {
		t.Fatalf("a job naming a secret not set, over NATS: %s", out)
	}

	// Deleted while the job waits in its pool's line (behind a job on the
	// pool's one slot): the worker that takes it fails it without running
	// it, and a retry waits for the secret.
	runBinaryInput(t, bin, dir, httpEnv, "hf_token_of_default", 0, "secret", "set", "HF_TOKEN")
	gpuq(0, "submit", "--tier", "spot", "--", "sleep", "3")
	lost := lastLine(strings.TrimSpace(gpuq(0, "submit", missing)))
	gpuq(0, "secret", "rm", "HF_TOKEN")
	if out := gpuq(ExitFailed, "wait", lost); !strings.Contains(out, "fetching its secrets HF_TOKEN: secret HF_TOKEN is not set for project default") ||
		!strings.Contains(out, "the job was not run") {
		t.Fatalf("a job whose secret was deleted while it waited: %s", out)
	}
	if logs := gpuq(0, "logs", lost); strings.Contains(logs, "ran") {
		t.Fatalf("a job whose secret is not set ran: %s", logs)
	}
	if out := gpuq(ExitRejected, "retry", lost); !strings.Contains(out, "secret HF_TOKEN is not set for project default") {
		t.Fatalf("retry of a job whose secret is not set: %s", out)
	}
	runBinaryInput(t, bin, dir, httpEnv, "hf_token_of_default", 0, "secret", "set", "HF_TOKEN")
	if out := gpuq(0, "retry", lost, "--wait"); !strings.Contains(out, lost+" succeeded") {
		t.Fatalf("retry once the secret is set: %s", out)
	}

	if out := gpuq(0, "secret", "rm", "WANDB_API_KEY"); !strings.Contains(out, "secret WANDB_API_KEY of project default deleted") {
		t.Fatalf("secret rm: %s", out)
	}
	gpuq(ExitNotFound, "secret", "rm", "WANDB_API_KEY")
	if out := gpuq(0, "secret", "ls"); strings.Contains(out, "WANDB_API_KEY") {
		t.Fatalf("secret ls after rm: %s", out)
	}
	for _, change := range []string{`msg="secret set" project=default name=WANDB_API_KEY token=`, `msg="secret deleted" project=default name=WANDB_API_KEY token=`} {
		if !strings.Contains(dev.logs.String(), change) {
			t.Fatalf("gpuq dev's output does not say %s", change)
		}
	}
	for _, v := range []string{value, "hf_token_of_vision", "hf_token_of_default"} {
		if strings.Contains(dev.logs.String(), v) {
			t.Fatalf("gpuq dev's output holds a secret's value")
		}
	}
}

// The servers' secrets.key_file is refused, naming the key, when others may
// read it, when it does not hold a key, or beside an unknown key; so is a
// GPUQ_SECRETS_KEY that holds none, or given with a file. Without either
// values are stored as they are.
func TestTheSecretsKeyFileIsCheckedNamingTheKey(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.key")
	if err := ensureSecretKey(good); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(good)
	if err := ensureSecretKey(good); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(good); string(after) != string(before) {
		t.Fatal("a second start made another key")
	}
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	check := func(conf, want string) {
		t.Helper()
		v := viper.New()
		v.SetConfigType("yaml")
		if err := v.ReadConfig(strings.NewReader(conf)); err != nil {
			t.Fatal(err)
		}
		sealer, err := secretSealer(v)
		switch {
		case want == "" && err != nil:
			t.Fatalf("%q: %v", conf, err)
		case want == "" && (sealer != nil) != (conf != "" || os.Getenv(envSecretsKey) != ""):
			t.Fatalf("%q: sealer %v", conf, sealer)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Fatalf("%q: %v, want %q", conf, err, want)
		}
	}
	for _, tc := range []struct {
		conf, want string
	}{
		{"", ""},
		{"secrets: {key_file: " + good + "}", ""},
		{"secrets: {key_file: " + write("open.key", string(before), 0o644) + "}", "secrets.key_file: " + dir + "/open.key is open to other users (mode 0644): chmod 600"},
		{"secrets: {key_file: " + write("short.key", "c2hvcnQ=\n", 0o600) + "}", "must hold 32 random bytes in base64 (head -c 32 /dev/urandom | base64 > " + dir + "/short.key): 5 bytes"},
		{"secrets: {key_file: " + dir + "/none.key}", "secrets.key_file: stat " + dir + "/none.key: no such file or directory"},
		{"secrets: {keyfile: " + good + "}", "config key secrets: "},
	} {
		check(tc.conf, tc.want)
	}
	// In the environment instead, as a container's settings are.
	t.Setenv(envSecretsKey, strings.TrimSpace(string(before)))
	check("", "")
	check("secrets: {key_file: "+good+"}", "secrets.key_file and GPUQ_SECRETS_KEY are both set: give the key once")
	t.Setenv(envSecretsKey, "not a key")
	check("", "GPUQ_SECRETS_KEY must hold 32 random bytes in base64 (openssl rand -base64 32): illegal base64 data")
}
