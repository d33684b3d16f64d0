package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSettingsResolveFlagThenEnvironmentThenFileThenDefault uses the NATS
// URL a client command tries to reach to see which source won.
func TestSettingsResolveFlagThenEnvironmentThenFileThenDefault(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "gpuq.yaml")
	if err := os.WriteFile(config, []byte("nats-url: nats://127.0.0.1:3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reached := func(args ...string) string {
		t.Helper()
		_, _, err := runCLI(t, append(append([]string{"submit", "--config", config}, args...), "--", "true")...)
		if err == nil {
			t.Fatal("want a connection error")
		}
		return err.Error()
	}
	if got := reached(); !strings.Contains(got, "127.0.0.1:3") {
		t.Fatalf("the config file must be read: %s", got)
	}
	t.Setenv("GPUQ_NATS_URL", "nats://127.0.0.1:2")
	if got := reached(); !strings.Contains(got, "127.0.0.1:2") {
		t.Fatalf("the environment must win over the file: %s", got)
	}
	if got := reached("--nats-url", "nats://127.0.0.1:1"); !strings.Contains(got, "127.0.0.1:1") {
		t.Fatalf("a flag must win over the environment: %s", got)
	}
	t.Setenv("GPUQ_NATS_URL", "")
	os.Unsetenv("GPUQ_NATS_URL")
	_, _, err := runCLI(t, "submit", "--", "true")
	if err == nil || !strings.Contains(err.Error(), "nats-url: not set") {
		t.Fatalf("with no source the error must name the setting and how to set it: %v", err)
	}
}
