package store

import (
	"context"
	"database/sql"
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
	row, err := s.q.ProjectSecretSet(ctx, db.ProjectSecretSetParams{
		Project: project, Name: name, Value: value, SetBy: setBy, MaxSecrets: queue.MaxProjectSecrets})
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
// their order.
func (s *Store) MissingSecrets(ctx context.Context, project string, names []string) ([]string, error) {
	held, err := s.secretValues(ctx, project, names)
	if err != nil {
		return nil, err
	}
	return absent(names, held), nil
}

// SecretValues returns the values of project's secrets names, by name;
// queue.ErrSecretMissing naming those it does not hold.
func (s *Store) SecretValues(ctx context.Context, project string, names []string) (map[string]string, error) {
	held, err := s.secretValues(ctx, project, names)
	if err != nil {
		return nil, err
	}
	if missing := absent(names, held); len(missing) > 0 {
		return nil, queue.SecretMissingError(project, missing)
	}
	return held, nil
}

func (s *Store) secretValues(ctx context.Context, project string, names []string) (map[string]string, error) {
	rows, err := s.q.ProjectSecretValues(ctx, db.ProjectSecretValuesParams{Project: project, Names: names})
	if err != nil {
		return nil, fmt.Errorf("reading the secrets of project %s: %w", project, err)
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.Name] = r.Value
	}
	return out, nil
}

// absent returns those of names that held does not hold, in their order.
func absent(names []string, held map[string]string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { _, ok := held[n]; return ok })
}
