// Package pgtest gives each test its own migrated PostgreSQL database. It uses
// GPUQ_TEST_DATABASE_URL when set, else a private cluster started once per
// test binary by Main. With CI=true a missing PostgreSQL fails the run instead
// of skipping tests.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	_ "github.com/lib/pq" // the database/sql driver gpuq uses

	"github.com/gpuq/gpuq/sql/migrations"
	"github.com/gpuq/gpuq/sql/pgtemp"
)

var (
	adminURL string
	setupErr error
	template string
	once     sync.Once
	cluster  *pgtemp.Cluster
)

// Main starts the private cluster when needed, runs the tests and removes the
// cluster. Call it from TestMain: os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if cluster == nil && template != "" && setupErr == nil {
		if admin, err := sql.Open("postgres", adminURL); err == nil {
			admin.Exec("DROP DATABASE IF EXISTS " + template) //nolint:errcheck // best effort on a shared server
			admin.Close()
		}
	}
	if cluster != nil {
		if err := cluster.Destroy(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: removing the private cluster:", err)
		}
	}
	return code
}

func setup() {
	adminURL = os.Getenv("GPUQ_TEST_DATABASE_URL")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if adminURL == "" {
		dir, err := os.MkdirTemp("", "gpuq-pgtest-")
		if err != nil {
			setupErr = err
			return
		}
		cluster, err = pgtemp.Start(ctx, dir, pgtemp.Options{})
		if err != nil {
			setupErr = err
			return
		}
		adminURL = cluster.URL()
	}
	template = "gpuq_tmpl_" + randomSuffix()
	admin, err := sql.Open("postgres", adminURL)
	if err != nil {
		setupErr = err
		return
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+template); err != nil {
		setupErr = fmt.Errorf("creating template database: %w", err)
		return
	}
	tdb, err := sql.Open("postgres", withDatabase(adminURL, template))
	if err != nil {
		setupErr = err
		return
	}
	defer tdb.Close()
	if _, err := migrations.Migrate(ctx, tdb); err != nil {
		setupErr = err
	}
}

// URL returns the connection string of a fresh migrated database that is
// dropped when t ends.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(setup)
	if setupErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL is required in CI: %v", setupErr)
		}
		t.Skipf("no PostgreSQL for tests (set GPUQ_TEST_DATABASE_URL or install the server): %v", setupErr)
	}
	name := "gpuq_test_" + randomSuffix()
	admin, err := sql.Open("postgres", adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec(fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, template)); err != nil {
		t.Fatalf("creating test database: %v", err)
	}
	t.Cleanup(func() {
		admin, err := sql.Open("postgres", adminURL)
		if err != nil {
			return
		}
		defer admin.Close()
		admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") //nolint:errcheck // best effort
	})
	return withDatabase(adminURL, name)
}

// DB opens a fresh migrated database that is dropped when t ends.
func DB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func withDatabase(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = "/" + name
	return u.String()
}

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
