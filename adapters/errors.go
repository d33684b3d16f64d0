package adapters

import (
	"errors"
	"fmt"
	"time"
)

// Kind is a kind of provider failure. Every adapter maps the errors its
// provider documents onto these kinds, so callers decide with errors.Is and
// never read a provider's error body.
type Kind struct {
	name string
	// parent is the broader kind this one belongs to, so that
	// errors.Is(ErrRateLimited, ErrTransient) holds.
	parent error
}

func (k *Kind) Error() string { return k.name }

// Unwrap returns the broader kind, if any.
func (k *Kind) Unwrap() error { return k.parent }

// The kinds of provider failure; a *ProviderError wraps one of them.
var (
	// ErrCapacityUnavailable: the pool has no capacity now; re-place or
	// try later. The ProviderError names the pool.
	ErrCapacityUnavailable = &Kind{name: "capacity unavailable"}
	// ErrQuotaExceeded: the account's quota or balance forbids more
	// capacity; retrying does not help until someone raises it.
	ErrQuotaExceeded = &Kind{name: "quota exceeded"}
	// ErrAuth: the credentials are missing, wrong, expired or lack the
	// permission; retrying does not help.
	ErrAuth = &Kind{name: "authentication failed"}
	// ErrInvalidRequest: the provider refused the request as malformed
	// (an unknown instance type, a bad image, a bad location).
	ErrInvalidRequest = &Kind{name: "invalid request"}
	// ErrNotFound: the instance (or other object) does not exist, or no
	// longer does.
	ErrNotFound = &Kind{name: "not found"}
	// ErrTransient: the call may succeed if retried, after RetryAfter.
	// ErrRateLimited and ErrProviderDown are transient.
	ErrTransient = &Kind{name: "transient provider error"}
	// ErrRateLimited: the provider throttled the caller; wait RetryAfter.
	ErrRateLimited = &Kind{name: "rate limited", parent: ErrTransient}
	// ErrProviderDown: the provider failed (5xx, timeout, connection
	// refused). For a launch the outcome is unknown: the machine may exist,
	// so a retry must first look for it by client token.
	ErrProviderDown = &Kind{name: "provider unavailable", parent: ErrTransient}
)

// ProviderError is a failure reported by a provider adapter.
type ProviderError struct {
	Provider string
	Pool     string // empty when the failure is not about one pool
	Op       string // what was being done: "offers", "launch", …
	Kind     error  // one of the Err… kinds above
	// RetryAfter is the provider's hint for transient errors; zero if none.
	RetryAfter time.Duration
	Err        error // the underlying cause, if any
}

func (e *ProviderError) Error() string {
	msg := e.Provider + ": " + e.Op
	if e.Pool != "" {
		msg += " in pool " + e.Pool
	}
	msg += ": " + e.Kind.Error()
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return msg
}

// Unwrap exposes both the kind and the cause to errors.Is and errors.As.
func (e *ProviderError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// RetryAfter returns the wait a transient error asks for: the provider's
// hint when it gave one, else zero. ok is false for errors that retrying
// does not cure.
func RetryAfter(err error) (wait time.Duration, ok bool) {
	if !errors.Is(err, ErrTransient) {
		return 0, false
	}
	var pe *ProviderError
	if errors.As(err, &pe) {
		return pe.RetryAfter, true
	}
	return 0, true
}
