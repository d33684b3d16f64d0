package cli

import (
	"strings"
	"testing"
)

func TestWorkerRefusesABadNoticeNamingTheFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--notice", "ibm"}, `notice: want aws, gcp, azure, sigterm or none, got "ibm"`},
		{[]string{"--provider", "acme"}, `provider: no known preemption signal for "acme"`},
		{[]string{"--notice", "aws", "--notice-endpoint", "169.254.169.254"}, "notice.endpoint: must be an http(s) URL"},
		{[]string{"--notice", "sigterm", "--notice-grace", "-5s"}, "notice.grace: must not be negative"},
	} {
		// The notice is checked before any connection is made.
		args := append([]string{"worker", "--pool", "p", "--no-canary", "--nats-url", "nats://127.0.0.1:1"}, c.args...)
		_, _, err := runCLI(t, args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("gpuq %s: want an error containing %q, got %v", strings.Join(c.args, " "), c.want, err)
		}
	}
}

func TestWorkerTakesNoDatabaseURL(t *testing.T) {
	t.Parallel()
	out, _, err := runCLI(t, "worker", "--help")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "database") || !strings.Contains(out, "--nats-url") {
		t.Fatalf("gpuq worker --help must offer --nats-url and no database flag:\n%s", out)
	}
	_, _, err = runCLI(t, "worker", "--pool", "p", "--no-canary", "--nats-url", "nats://127.0.0.1:1", "--database-url", "postgres://x")
	if err == nil || !strings.Contains(err.Error(), "unknown flag: --database-url") {
		t.Fatalf("gpuq worker --database-url: want an unknown flag error, got %v", err)
	}
}
