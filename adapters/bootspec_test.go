package adapters_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/adapters"
)

const testCredential = "SUAVERYSECRETNKEYSEED-do-not-print"

func bootSpec() adapters.BootSpec {
	return adapters.BootSpec{
		InstanceID: "i-0123", Pool: "h100-eu", Region: "FIN-01", Country: "FI", Slots: 2,
		Notice: adapters.NoticeNone, WorkerArgs: []string{"--ack-wait", "30s"},
		NATSURL: "tls://nats.example.org:4222", Credential: adapters.NewSecret(testCredential),
		Image: "ghcr.io/gpuq/worker:1",
	}
}

func TestBootSpecNeverPrintsItsCredential(t *testing.T) {
	t.Parallel()
	b := bootSpec()
	c, err := b.Container()
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("launch", "boot", b, "container", c, "secret", b.Credential)
	js, _ := json.Marshal(b)
	for name, s := range map[string]string{
		"%v": fmt.Sprintf("%v", b), "%+v": fmt.Sprintf("%+v", b), "%#v": fmt.Sprintf("%#v", b),
		"container %+v": fmt.Sprintf("%+v", c), "container %#v": fmt.Sprintf("%#v", c),
		"json": string(js), "slog": logged.String(), "command": strings.Join(b.Command(), " "),
	} {
		if strings.Contains(s, testCredential) {
			t.Errorf("%s prints the credential: %s", name, s)
		}
	}
	if c.Env[adapters.EnvNATSCredential] != testCredential {
		t.Errorf("container env lacks the credential the worker needs")
	}
}

func TestBootSpecRendersTheWorkerCommandLine(t *testing.T) {
	t.Parallel()
	want := "/usr/local/bin/gpuq worker --pool h100-eu --region FIN-01 --country FI --instance-id i-0123 --slots 2 --notice none --ack-wait 30s"
	if got := strings.Join(bootSpec().Command(), " "); got != want {
		t.Errorf("Command = %q, want %q", got, want)
	}
}

func TestBootSpecRendersCloudInit(t *testing.T) {
	t.Parallel()
	b := bootSpec()
	b.Credential = adapters.NewSecret(`pa"ss\word`)
	got, err := b.CloudInit()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"#cloud-config\n",
		"  - path: /etc/gpuq/worker.env\n    permissions: \"0600\"\n",
		`      GPUQ_NATS_URL="tls://nats.example.org:4222"` + "\n",
		`      GPUQ_NATS_CREDENTIAL="pa\"ss\\word"` + "\n",
		"      ExecStart=\n      ExecStart=/usr/local/bin/gpuq worker --pool h100-eu --region FIN-01",
		`  - [systemctl, enable, --now, "gpuq-worker@h100-eu.service"]`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("cloud-init lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(strings.ToLower(got), "database") {
		t.Errorf("cloud-init mentions a database:\n%s", got)
	}
}

func TestBootSpecRefusesBadFieldsNamingThem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*adapters.BootSpec)
		want   string
	}{
		{"database url flag", func(b *adapters.BootSpec) { b.WorkerArgs = []string{"--database-url", "x"} }, "worker_args[0]: a worker is never given a database URL"},
		{"database url value", func(b *adapters.BootSpec) { b.WorkerArgs = []string{"postgres://u@h/db"} }, "worker_args[0]: a worker is never given a database URL"},
		{"postgres as nats url", func(b *adapters.BootSpec) { b.NATSURL = "postgres://db:5432/gpuq" }, "nats_url: want a nats://"},
		{"password in nats url", func(b *adapters.BootSpec) { b.NATSURL = "nats://u:p@h:4222" }, "nats_url: must not carry a user or password"},
		{"shell in args", func(b *adapters.BootSpec) { b.WorkerArgs = []string{"$(reboot)"} }, "worker_args[0]:"},
		{"multi-line credential", func(b *adapters.BootSpec) { b.Credential = adapters.NewSecret("a\nb") }, "credential: want one line"},
		{"lower-case country", func(b *adapters.BootSpec) { b.Country = "fi" }, "country:"},
		{"bad instance id", func(b *adapters.BootSpec) { b.InstanceID = "i 1" }, "instance_id:"},
		{"bad notice", func(b *adapters.BootSpec) { b.Notice = "pager" }, "notice:"},
		{"relative executable", func(b *adapters.BootSpec) { b.Executable = "gpuq" }, "executable:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bootSpec()
			tt.change(&b)
			_, err := b.CloudInit()
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("CloudInit = %v, want prefix %q", err, tt.want)
			}
			if strings.Contains(fmt.Sprint(err), testCredential) {
				t.Errorf("error prints the credential")
			}
		})
	}
}

func TestContainerNeedsAnImage(t *testing.T) {
	t.Parallel()
	b := bootSpec()
	b.Image = ""
	if _, err := b.Container(); err == nil || !strings.HasPrefix(err.Error(), "image: must be set") {
		t.Errorf("Container = %v", err)
	}
}

func TestBootSpecRendersAStartupScript(t *testing.T) {
	t.Parallel()
	got, err := bootSpec().StartupScript()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"#!/bin/sh\n", "umask 077\n", "cat > /etc/gpuq/worker.env <<'GPUQ_BOOT_EOF'\n",
		`GPUQ_NATS_CREDENTIAL="` + testCredential + `"` + "\n",
		"ExecStart=/usr/local/bin/gpuq worker --pool h100-eu", "systemctl enable --now gpuq-worker@h100-eu.service\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("startup script lacks %q:\n%s", want, got)
		}
	}
	// The script must be valid shell.
	if out, err := exec.Command("sh", "-n", "-c", got).CombinedOutput(); err != nil {
		t.Errorf("sh -n: %v\n%s", err, out)
	}
}

func TestSecretInAnUnexportedFieldDoesNotPrint(t *testing.T) {
	t.Parallel()
	type holder struct{ secret adapters.Secret }
	h := holder{secret: adapters.NewSecret(testCredential)}
	for _, s := range []string{fmt.Sprintf("%v", h), fmt.Sprintf("%+v", h), fmt.Sprintf("%#v", h), fmt.Sprintf("%+v", &h)} {
		if strings.Contains(s, testCredential) {
			t.Errorf("printed %s", s)
		}
	}
	if h.secret.Reveal() != testCredential {
		t.Errorf("Reveal lost the value")
	}
}
