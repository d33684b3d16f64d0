package adapters

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpuq/gpuq/policy"
)

// OfferSource is what placement needs from a provider: what it can rent now.
type OfferSource interface {
	// Name is the provider's name, as set in its offers.
	Name() string
	// Offers lists the provider's current offers, one per pool.
	Offers(ctx context.Context) ([]policy.Offer, error)
}

// The kinds of provider failure; a *ProviderError wraps one of them so that
// callers decide with errors.Is.
var (
	// ErrCapacityUnavailable: the pool has no capacity now; re-place.
	ErrCapacityUnavailable = errors.New("capacity unavailable")
	// ErrQuotaExceeded: the account's quota forbids more capacity.
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrTransient: the call may succeed if retried, after RetryAfter.
	ErrTransient = errors.New("transient provider error")
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

// CollectOffers asks every source for its offers. A source that fails or
// returns a malformed offer is left out and its error joined into the
// returned error, so placement can go ahead with the others.
func CollectOffers(ctx context.Context, sources ...OfferSource) ([]policy.Offer, error) {
	var offers []policy.Offer
	var errs []error
	for _, s := range sources {
		got, err := s.Offers(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("offers from %s: %w", s.Name(), err))
			continue
		}
		for i, o := range got {
			if err := o.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("offers from %s: offer %d (pool %q): %w", s.Name(), i, o.Pool, err))
				got = nil
				break
			}
		}
		offers = append(offers, got...)
	}
	return offers, errors.Join(errs...)
}
