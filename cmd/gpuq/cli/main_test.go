package cli

import (
	"os"
	"testing"

	"github.com/gpuq/gpuq/sql/pgtest"
)

// TestMain removes the private PostgreSQL cluster the tests that need a
// database start (pgtest starts it on first use only).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
