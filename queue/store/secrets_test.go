package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
)

func sealer(t *testing.T, b byte) *store.SecretSealer {
	t.Helper()
	s, err := store.NewSecretSealer(bytes.Repeat([]byte{b}, store.SecretKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// With a secrets key a value is stored sealed, bound to its project and
// name: the database holds nothing of it that reads without the key, a
// server with another key or none cannot open it (and says what to do),
// and a sealed value copied into another secret's row does not open. A
// value stored before a key was configured is still read.
func TestASecretIsSealedInTheDatabaseWithTheServersKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, url := queuetest.Store(t, nil)
	const value = "hf_live_value_0123456789"
	if _, err := s.SetSecret(ctx, "ml", "PLAIN", "set-before-a-key", "test"); err != nil {
		t.Fatal(err)
	}
	s.Sealer = sealer(t, 1)
	for _, name := range []string{"HF_TOKEN", "OTHER"} {
		if _, err := s.SetSecret(ctx, "ml", name, value, "test"); err != nil {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var stored string
	var sealed bool
	if err := db.QueryRowContext(ctx, "SELECT value, sealed FROM project_secrets WHERE project = 'ml' AND name = 'HF_TOKEN'").Scan(&stored, &sealed); err != nil {
		t.Fatal(err)
	}
	if !sealed || strings.Contains(stored, value) || strings.Contains(stored, "hf_live") {
		t.Fatalf("the database holds %q (sealed %v) for the value %q", stored, sealed, value)
	}
	got, err := s.SecretValues(ctx, "ml", []string{"HF_TOKEN", "PLAIN"})
	if err != nil || !maps.Equal(got, map[string]string{"HF_TOKEN": value, "PLAIN": "set-before-a-key"}) {
		t.Fatalf("values with the key: %v, %v", got, err)
	}

	other, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.SecretValues(ctx, "ml", []string{"HF_TOKEN"}); err == nil || !strings.Contains(err.Error(), "secret HF_TOKEN of project ml is sealed, and this server has no secrets.key_file") {
		t.Fatalf("values without a key: %v", err)
	}
	// Which secrets are set needs no key: a submission is checked alike
	// on every server.
	if missing, err := other.MissingSecrets(ctx, "ml", []string{"HF_TOKEN", "NEVER_SET", "PLAIN"}); err != nil || !slices.Equal(missing, []string{"NEVER_SET"}) {
		t.Fatalf("secrets not set, asked without a key: %v, %v", missing, err)
	}
	other.Sealer = sealer(t, 2)
	if _, err := other.SecretValues(ctx, "ml", []string{"HF_TOKEN"}); err == nil || !strings.Contains(err.Error(), "does not open with this server's secrets.key_file") {
		t.Fatalf("values with another key: %v", err)
	}
	if _, err := db.ExecContext(ctx, "UPDATE project_secrets SET value = $1 WHERE project = 'ml' AND name = 'OTHER'", stored); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SecretValues(ctx, "ml", []string{"OTHER"}); err == nil || !strings.Contains(err.Error(), "secret OTHER of project ml does not open") {
		t.Fatalf("another secret's sealed value: %v", err)
	}
	for _, err := range []error{func() error { _, err := s.SetSecret(ctx, "ml", "GPUQ_X", value, "test"); return err }(),
		func() error { _, err := s.SetSecret(ctx, "ml", "EMPTY", "", "test"); return err }()} {
		if err == nil || strings.Contains(err.Error(), value) {
			t.Fatalf("a bad secret: %v", err)
		}
	}
	if _, err := s.SecretValues(ctx, "ml", []string{"HF_TOKEN", "NEVER_SET"}); !errors.Is(err, queue.ErrSecretMissing) || !strings.Contains(err.Error(), "secret NEVER_SET is not set for project ml") {
		t.Fatalf("a secret never set: %v", err)
	}
}
