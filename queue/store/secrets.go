package store

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/db"
)

// SetSecret stores project's secret name, or replaces its value;
// queue.ErrTooManySecrets when the name is new and the project holds
// queue.MaxProjectSecrets already. An error never holds the value.
func (s *Store) SetSecret(ctx context.Context, project, name, value, setBy string) (*queue.Secret, error) {
	if err := queue.ValidateSecretName(name); err != nil {
		return nil, fmt.Errorf("name: %w", err)
	}
	if err := queue.ValidateSecretValue(value); err != nil {
		return nil, fmt.Errorf("value: %w", err)
	}
	stored, sealed := value, false
	if s.Sealer != nil {
		stored, sealed = s.Sealer.seal(project, name, value), true
	}
	row, err := s.q.ProjectSecretSet(ctx, db.ProjectSecretSetParams{
		Project: project, Name: name, Value: stored, Sealed: sealed, SetBy: setBy, MaxSecrets: queue.MaxProjectSecrets})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("project %s: %w: delete one first (gpuq secret rm)", project, queue.ErrTooManySecrets)
	}
	if err != nil {
		return nil, fmt.Errorf("setting secret %s of project %s: %w", name, project, err)
	}
	return &queue.Secret{Project: row.Project, Name: row.Name, SetBy: row.SetBy, SetAt: row.SetAt}, nil
}

// Secrets lists project's secrets by name, without their values.
func (s *Store) Secrets(ctx context.Context, project string) ([]queue.Secret, error) {
	rows, err := s.q.ProjectSecretList(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("listing the secrets of project %s: %w", project, err)
	}
	out := make([]queue.Secret, 0, len(rows))
	for _, r := range rows {
		out = append(out, queue.Secret{Project: r.Project, Name: r.Name, SetBy: r.SetBy, SetAt: r.SetAt})
	}
	return out, nil
}

// DeleteSecret deletes project's secret name; queue.ErrNotFound when it is
// not set. A job naming it that has not started yet fails without running.
func (s *Store) DeleteSecret(ctx context.Context, project, name string) error {
	n, err := s.q.ProjectSecretDelete(ctx, db.ProjectSecretDeleteParams{Project: project, Name: name})
	if err != nil {
		return fmt.Errorf("deleting secret %s of project %s: %w", name, project, err)
	}
	if n == 0 {
		return fmt.Errorf("secret %s of project %s: %w", name, project, queue.ErrNotFound)
	}
	return nil
}

// MissingSecrets returns those of names that project does not hold, in
// their order. No value is read, so a server without the secrets key can
// tell too.
func (s *Store) MissingSecrets(ctx context.Context, project string, names []string) ([]string, error) {
	rows, err := s.secretRows(ctx, project, names)
	if err != nil {
		return nil, err
	}
	return absent(names, rows), nil
}

// SecretValues returns the values of project's secrets names, by name,
// opened when sealed; queue.ErrSecretMissing naming those it does not hold.
func (s *Store) SecretValues(ctx context.Context, project string, names []string) (map[string]string, error) {
	rows, err := s.secretRows(ctx, project, names)
	if err != nil {
		return nil, err
	}
	if missing := absent(names, rows); len(missing) > 0 {
		return nil, queue.SecretMissingError(project, missing)
	}
	out := make(map[string]string, len(rows))
	for name, r := range rows {
		switch {
		case !r.Sealed:
			out[name] = r.Value
		case s.Sealer == nil:
			return nil, fmt.Errorf("secret %s of project %s is sealed, and this server has no secrets.key_file to open it: configure the key it was set with, or set it again", name, project)
		default:
			if out[name], err = s.Sealer.open(project, name, r.Value); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// secretRows reads project's secrets of names that are set, by name, as
// stored.
func (s *Store) secretRows(ctx context.Context, project string, names []string) (map[string]db.ProjectSecretValuesRow, error) {
	rows, err := s.q.ProjectSecretValues(ctx, db.ProjectSecretValuesParams{Project: project, Names: names})
	if err != nil {
		return nil, fmt.Errorf("reading the secrets of project %s: %w", project, err)
	}
	out := make(map[string]db.ProjectSecretValuesRow, len(rows))
	for _, r := range rows {
		out[r.Name] = r
	}
	return out, nil
}

// SecretKeyBytes is the length of the key secrets are sealed with.
const SecretKeyBytes = 32

// SecretSealer seals secrets' values with AES-256-GCM, each bound to its
// project and name, so that the database (and its backups) holds no value
// a reader without the key can use, and a sealed value moved to another
// secret's row does not open.
type SecretSealer struct{ aead cipher.AEAD }

// NewSecretSealer returns a sealer with key, SecretKeyBytes long.
func NewSecretSealer(key []byte) (*SecretSealer, error) {
	if len(key) != SecretKeyBytes {
		return nil, fmt.Errorf("a secrets key must be %d bytes, got %d", SecretKeyBytes, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &SecretSealer{aead: aead}, nil
}

// sealedFor is what a sealed value is bound to.
func sealedFor(project, name string) []byte { return []byte(project + "/" + name) }

func (c *SecretSealer) seal(project, name, value string) string {
	nonce := make([]byte, c.aead.NonceSize(), c.aead.NonceSize()+len(value)+c.aead.Overhead())
	rand.Read(nonce) //nolint:errcheck // crypto/rand.Read never fails
	return base64.StdEncoding.EncodeToString(c.aead.Seal(nonce, nonce, []byte(value), sealedFor(project, name)))
}

func (c *SecretSealer) open(project, name, sealed string) (string, error) {
	data, err := base64.StdEncoding.DecodeString(sealed)
	if err == nil && len(data) < c.aead.NonceSize() {
		err = errors.New("too short")
	}
	var value []byte
	if err == nil {
		value, err = c.aead.Open(nil, data[:c.aead.NonceSize()], data[c.aead.NonceSize():], sealedFor(project, name))
	}
	if err != nil {
		return "", fmt.Errorf("secret %s of project %s does not open with this server's secrets.key_file (sealed with another key, or not this secret's): set it again", name, project)
	}
	return string(value), nil
}

// absent returns those of names that held does not hold, in their order.
func absent(names []string, held map[string]db.ProjectSecretValuesRow) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { _, ok := held[n]; return ok })
}
