package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/migrations"
	"github.com/gpuq/gpuq/sql/pgtemp"
)

// stack is the infrastructure every measurement runs on: one embedded NATS
// server and one private PostgreSQL cluster with fsync and synchronous
// commit on, shared by gpuq and River.
type stack struct {
	dir    string
	pgData string // the cluster's data directory, for its CPU time
	// pgStatements: the cluster preloads pg_stat_statements (its view is
	// in the postgres database).
	pgStatements bool
	pg           *pgtemp.Cluster
	nats         *queue.EmbeddedNATS
	nc           *nats.Conn
	js           jetstream.JetStream
	dbs          int
}

func startStack(ctx context.Context, dir string, pgStatements bool) (*stack, error) {
	s := &stack{dir: dir, pgData: filepath.Join(dir, "postgres", "data"), pgStatements: pgStatements}
	opts := pgtemp.Options{Durable: true}
	if pgStatements {
		opts.Settings = []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track_planning=on"}
	}
	var err error
	if s.pg, err = pgtemp.Start(ctx, filepath.Join(dir, "postgres"), opts); err != nil {
		return nil, err
	}
	if pgStatements {
		admin, err := sql.Open("postgres", s.pg.URL())
		if err != nil {
			s.Close()
			return nil, err
		}
		_, err = admin.ExecContext(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
		admin.Close()
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("pg_stat_statements: %w", err)
		}
	}
	if s.nats, err = queue.StartEmbeddedNATS(filepath.Join(dir, "nats"), 0); err != nil {
		s.Close()
		return nil, err
	}
	if s.nc, s.js, err = s.connect(); err != nil {
		s.Close()
		return nil, err
	}
	if err := queue.EnsureStreams(ctx, s.js, queue.StreamOptions{}); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// connect opens a NATS connection of its own, as a separate process would.
func (s *stack) connect() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(s.nats.ControlURL())
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// freshDB creates an empty database in the cluster; with gpuqSchema it is
// migrated to gpuq's schema.
func (s *stack) freshDB(ctx context.Context, prefix string, gpuqSchema bool) (string, error) {
	s.dbs++
	name := fmt.Sprintf("%s_%d", prefix, s.dbs)
	admin, err := sql.Open("postgres", s.pg.URL())
	if err != nil {
		return "", err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("creating database %s: %w", name, err)
	}
	url := s.pg.DatabaseURL(name)
	if gpuqSchema {
		db, err := sql.Open("postgres", url)
		if err != nil {
			return "", err
		}
		defer db.Close()
		if _, err := migrations.Migrate(ctx, db); err != nil {
			return "", err
		}

	}
	return url, nil
}

// resetStreams empties gpuq's streams between measurements.
func (s *stack) resetStreams(ctx context.Context) error {
	for _, name := range []string{queue.StreamSubmit, queue.StreamRun, queue.StreamEvents, queue.StreamLogs} {
		st, err := s.js.Stream(ctx, name)
		if err != nil {
			return err
		}
		if err := st.Purge(ctx); err != nil {
			return fmt.Errorf("purging %s: %w", name, err)
		}
	}
	return nil
}

// streamMsgs is how many messages a stream holds.
func (s *stack) streamMsgs(ctx context.Context, name string) (uint64, error) {
	st, err := s.js.Stream(ctx, name)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// pgVersion is the server's version string.
func (s *stack) pgVersion(ctx context.Context) string {
	db, err := sql.Open("postgres", s.pg.URL())
	if err != nil {
		return ""
	}
	defer db.Close()
	var v string
	db.QueryRowContext(ctx, "SHOW server_version").Scan(&v) //nolint:errcheck // informational
	return v
}

func (s *stack) Close() {
	if s.nc != nil {
		s.nc.Close()
	}
	if s.nats != nil {
		s.nats.Stop()
	}
	if s.pg != nil {
		s.pg.Destroy() //nolint:errcheck // a temporary cluster
	}
}

// poll calls cond every interval until it returns true, an error, or timeout.
func poll(ctx context.Context, interval, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
