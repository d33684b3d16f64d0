package local_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/adapters/local"
)

// A worker the launcher starts gets this process's environment, less what
// only the control plane may hold (its database URL and secrets key), plus
// the pool's own variables.
func TestALaunchedWorkerGetsTheEnvironmentLessWhatOnlyTheControlPlaneHolds(t *testing.T) {
	t.Setenv("GPUQ_DATABASE_URL", "postgres://control:pw@db/gpuq")
	t.Setenv("GPUQ_SECRETS_KEY", "a-key")
	t.Setenv("GPUQ_TEST_KEPT", "kept")
	dir := t.TempDir()
	exe := filepath.Join(dir, "worker")
	out := filepath.Join(dir, "env")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nenv > "+out+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	l := &local.Launcher{Executable: exe}
	inst, err := l.Start(context.Background(), "p", nil, []string{"GPUQ_NATS_CREDENTIAL=worker.p.r:pw"})
	if err != nil {
		t.Fatal(err)
	}
	if err := inst.Wait(); err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"GPUQ_TEST_KEPT=kept\n", "GPUQ_NATS_CREDENTIAL=worker.p.r:pw\n"} {
		if !strings.Contains(string(env), want) {
			t.Fatalf("the worker's environment lacks %q:\n%s", want, env)
		}
	}
	for _, gone := range []string{"GPUQ_DATABASE_URL=", "GPUQ_SECRETS_KEY="} {
		if strings.Contains(string(env), gone) {
			t.Fatalf("the worker's environment holds %s:\n%s", gone, env)
		}
	}
}
