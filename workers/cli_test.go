package workers_test

import (
	"bytes"
	"testing"

	"github.com/gpuq/gpuq/cmd/gpuq/cli"
)

// runCLI runs a gpuq command in-process and checks its exit status.
func runCLI(t *testing.T, wantCode int, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := cli.Main(args, &out, &errOut); code != wantCode {
		t.Fatalf("gpuq %v: exit status %d, want %d\n%s%s", args, code, wantCode, out.String(), errOut.String())
	}
	return out.String() + errOut.String()
}
