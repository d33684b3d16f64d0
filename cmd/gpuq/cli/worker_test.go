package cli

import (
	"os"
	"path/filepath"
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

func TestWorkerTakesItsRegionAndCountryFromThePoolsConfig(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "gpuq.yaml")
	if err := os.WriteFile(cfg, []byte("pools:\n  - {pool: eu-gpu, region: eu-central-1, country: DE, card: cpu, vcpu: 4, memory_gb: 8, tier: on-demand, price_per_hour: '1.00'}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	location := func(args ...string) (string, string, error) {
		cmd := newWorkerCmd()
		cmd.Flags().String("config", "", "the root command's --config")
		if err := cmd.ParseFlags(append([]string{"--config", cfg}, args...)); err != nil {
			t.Fatal(err)
		}
		v, err := loadConfig(cmd)
		if err != nil {
			t.Fatal(err)
		}
		return workerLocation(cmd, v, v.GetString("pool"))
	}
	if r, c, err := location("--pool", "eu-gpu"); err != nil || r != "eu-central-1" || c != "DE" {
		t.Fatalf("pool in the config: got %q %q %v, want eu-central-1 DE", r, c, err)
	}
	if _, _, err := location("--pool", "eu-gpu", "--country", "US"); err == nil || !strings.Contains(err.Error(), `country: "US" contradicts pool eu-gpu's country "DE"`) {
		t.Fatalf("a contradicting --country: %v", err)
	}
	if r, c, err := location("--pool", "other", "--region", "r1", "--country", "FR"); err != nil || r != "r1" || c != "FR" {
		t.Fatalf("a pool not in the config: got %q %q %v, want the flags", r, c, err)
	}
}
