package queue

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Secret is a value a project keeps on the control plane (an API key, a
// token) for its jobs: a spec names it in secrets, and the job finds it in
// the environment variable of its name. Its value is never part of a
// document: only the worker running a job that names it receives it.
type Secret struct {
	Project string    `json:"project"`
	Name    string    `json:"name" doc:"the environment variable a job naming it in its spec's secrets finds its value in"`
	SetBy   string    `json:"set_by" doc:"the token (its id) or the command that set its value last"`
	SetAt   time.Time `json:"set_at"`
}

// Bounds on secrets: a value fits an environment variable on every
// platform a worker runs on, and a project keeps a bounded number.
const (
	MaxSecretBytes    = 32 << 10
	MaxProjectSecrets = 500
	maxSecretName     = 128
	// maxSpecSecrets bounds the names one spec may list.
	maxSpecSecrets = 64
)

// ErrSecretMissing is a secret a job names that its project does not hold
// (never set, or deleted since the job was submitted).
var ErrSecretMissing = errors.New("secret not set")

// ErrTooManySecrets is a new secret of a project that holds
// MaxProjectSecrets already.
var ErrTooManySecrets = fmt.Errorf("a project holds at most %d secrets", MaxProjectSecrets)

// ValidateSecretName checks that name can be a secret's: an environment
// variable's name, not one of the GPUQ_* variables the worker sets.
func ValidateSecretName(name string) error {
	switch {
	case !envNameRe.MatchString(name):
		return fmt.Errorf("must be an environment variable's name: a letter or '_', then letters, digits or '_', got %.80q", name)
	case len(name) > maxSecretName:
		return fmt.Errorf("must be at most %d characters, got %d", maxSecretName, len(name))
	case strings.HasPrefix(name, "GPUQ_"):
		return fmt.Errorf("GPUQ_* variables are set by the worker, got %s", name)
	}
	return nil
}

// ValidateSecretValue checks that value can be a secret's: a non-empty
// string an environment variable can hold, at most MaxSecretBytes. The
// message never holds the value.
func ValidateSecretValue(value string) error {
	switch {
	case value == "":
		return errors.New("must not be empty")
	case len(value) > MaxSecretBytes:
		return fmt.Errorf("must be at most %d bytes, got %d", MaxSecretBytes, len(value))
	case strings.IndexByte(value, 0) >= 0:
		return errors.New("must not hold a NUL byte: an environment variable cannot")
	case !utf8.ValidString(value):
		return errors.New("must be UTF-8 text")
	}
	return nil
}

// SecretMissingError names the secrets a job names that its project does
// not hold.
func SecretMissingError(project string, names []string) error {
	return &sentinelError{is: ErrSecretMissing, msg: fmt.Sprintf(
		"%s not set for project %s (never set, or deleted since the job was submitted): gpuq secret set --project %s %s",
		secretsAre(names), project, project, names[0])}
}

// SecretRejection is why a submitted job naming secrets its project does
// not hold is rejected.
func SecretRejection(project string, names []string) string {
	return fmt.Sprintf("%s not set for project %s: set it (gpuq secret set --project %s %s) and retry the job",
		secretsAre(names), project, project, names[0])
}

// secretsAre names secrets as the subject of a sentence.
func secretsAre(names []string) string {
	if len(names) > 1 {
		return "secrets " + strings.Join(names, ", ") + " are"
	}
	return "secret " + names[0] + " is"
}
