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

func TestSettingsReachTheServerAndABadOneChangesNothing(t *testing.T) {
	if _, err := pgtemp.BinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs PostgreSQL's server binaries: %v", err)
		}
		t.Skip(err)
	}
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
	db, err := sql.Open("postgres", c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var workMem string
	if err := db.QueryRowContext(ctx, "SHOW work_mem").Scan(&workMem); err != nil {
		t.Fatal(err)
	}
	if workMem != "7MB" {
		t.Fatalf("work_mem = %s, want the 7MB the settings asked for", workMem)
	}
}

// A cluster starts wherever its directory is: under a path longer than a
// Unix socket's name may be and holding a space, as a user's project
// directory may (gpuq dev keeps its cluster in .gpuq/postgres there).
func TestAClusterStartsUnderALongPathWithSpaces(t *testing.T) {
	if _, err := pgtemp.BinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs PostgreSQL's server binaries: %v", err)
		}
		t.Skip(err)
	}
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
	db, err := sql.Open("postgres", c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1: %d %v", one, err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if c, err = pgtemp.Start(ctx, dir, pgtemp.Options{Password: true}); err != nil {
		t.Fatalf("starting it again: %v", err)
	}
}
