package workers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A job's control socket must open however deep the worker's data and
// temporary directories lie: a socket path over the kernel's limit fails
// to bind, and every attempt would be handed back unrun.
func TestControlSocketOpensUnderDirectoriesTooDeepForASocketPath(t *testing.T) {
	deep := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", deep)
	ctl, err := listenControl(deep, func(context.Context) (int, error) { return 7, nil })
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	if len(ctl.path) > maxSocketPath {
		t.Fatalf("socket path of %d bytes, over %d: %s", len(ctl.path), maxSocketPath, ctl.path)
	}
	seq, err := SaveCheckpoint(context.Background(), ctl.path)
	if err != nil || seq != 7 {
		t.Fatalf("save through the socket: seq %d, %v; want 7", seq, err)
	}
}
