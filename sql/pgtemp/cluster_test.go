package pgtemp_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/lib/pq"

	"github.com/gpuq/gpuq/sql/pgtemp"
)

// needServerBinaries skips a test where initdb and pg_ctl are missing, and
// fails it in CI.
func needServerBinaries(t *testing.T) {
	t.Helper()
	if _, err := pgtemp.BinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs PostgreSQL's server binaries: %v", err)
		}
		t.Skip(err)
	}
}

// queryOne is the one value q answers on c.
func queryOne(t *testing.T, c *pgtemp.Cluster, q string) string {
	t.Helper()
	db, err := sql.Open("postgres", c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v string
	if err := db.QueryRow(q).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

func TestSettingsReachTheServerAndABadOneChangesNothing(t *testing.T) {
	needServerBinaries(t)
	ctx := context.Background()
	root := t.TempDir()
	for _, bad := range []string{"work_mem", "=7MB", "work_mem=7 MB", "work_mem='7MB'"} {
		dir := filepath.Join(root, "refused")
		if _, err := pgtemp.Start(ctx, dir, pgtemp.Options{Settings: []string{bad}}); err == nil {
			t.Fatalf("setting %q: started, want it refused", bad)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("setting %q: refused, but %s was made (%v)", bad, dir, err)
		}
	}
	c, err := pgtemp.Start(ctx, filepath.Join(root, "pg"), pgtemp.Options{Settings: []string{"work_mem=7MB", "application_name=pgtemp-test"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Destroy() }) //nolint:errcheck // a temporary cluster
	if workMem := queryOne(t, c, "SHOW work_mem"); workMem != "7MB" {
		t.Fatalf("work_mem = %s, want the 7MB the settings asked for", workMem)
	}
}

// A cluster starts wherever its directory is: under a path longer than a
// Unix socket's name may be and holding a space, as a user's project
// directory may (gpuq dev keeps its cluster in .gpuq/postgres there).
func TestAClusterStartsUnderALongPathWithSpaces(t *testing.T) {
	needServerBinaries(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "My Projects", strings.Repeat("a-long-directory-name-", 5), ".gpuq", "postgres")
	if len(dir) <= 107 {
		t.Fatalf("%s: want a path longer than a Unix socket's name may be", dir)
	}
	c, err := pgtemp.Start(ctx, dir, pgtemp.Options{Password: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Destroy() }) //nolint:errcheck // a temporary cluster
	if one := queryOne(t, c, "SELECT 1"); one != "1" {
		t.Fatalf("SELECT 1: %s", one)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if c, err = pgtemp.Start(ctx, dir, pgtemp.Options{Password: true}); err != nil {
		t.Fatalf("starting it again: %v", err)
	}
}
