package pgtemp

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// A port chosen for a cluster can be taken by another process before the
// server binds it (tests and gpuq dev start clusters side by side): the
// cluster then starts on another port instead of failing.
func TestAClusterWhosePortWasTakenStartsOnAnother(t *testing.T) {
	if _, err := BinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs PostgreSQL's server binaries: %v", err)
		}
		t.Skip(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	chosen := 0
	choosePort = func() (int, error) {
		chosen++
		if chosen == 1 {
			return port, nil // as if another process bound it meanwhile
		}
		return freePort()
	}
	defer func() { choosePort = freePort }()
	c, err := Start(context.Background(), filepath.Join(t.TempDir(), "pg"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy() //nolint:errcheck // test cleanup
	if chosen != 2 || c.Port() == port {
		t.Fatalf("want the cluster on a second port chosen after %d was found taken; chose %d times, listens on %d", port, chosen, c.Port())
	}
}
