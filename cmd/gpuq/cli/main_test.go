package cli

import (
	"os"
	"testing"

	"github.com/gpuq/gpuq/sql/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
