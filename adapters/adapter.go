package adapters

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuq/gpuq/policy"
)

// OfferSource is what placement needs from a provider: what it can rent now.
type OfferSource interface {
	// Name is the provider's name, as set in its offers.
	Name() string
	// Offers lists the provider's current offers, one per pool. A pool the
	// adapter cannot place in a country is left out, never guessed.
	Offers(ctx context.Context) ([]policy.Offer, error)
}

// Launcher rents one instance into a pool.
type Launcher interface {
	// Launch rents one machine for req.Pool booted with req.Boot. It is
	// idempotent by req.ClientToken: a second call with the same token
	// returns the instance the first one rented. The instance may still be
	// pending when Launch returns.
	Launch(ctx context.Context, req LaunchRequest) (Instance, error)
}

// InstanceLister lists the instances an adapter rented (those carrying
// gpuq's tags), for the reaper and for finding a launch by its token.
type InstanceLister interface {
	// Instances follows every page of the provider's listing and returns
	// the instances that match f.
	Instances(ctx context.Context, f InstanceFilter) ([]Instance, error)
}

// Describer reads one instance.
type Describer interface {
	// Describe returns the instance with the provider's id; an error
	// matching ErrNotFound when the provider has no such instance.
	Describe(ctx context.Context, providerID string) (Instance, error)
}

// Terminator releases instances.
type Terminator interface {
	// Terminate releases the instance. Terminating an instance that is
	// already gone, or that the provider no longer knows, is not an error:
	// most providers forget terminated instances.
	Terminate(ctx context.Context, providerID string) error
}

// Provider is the whole contract: what the autoscaler and reaper use. Each
// consumer should accept the narrowest of the interfaces above it needs.
type Provider interface {
	OfferSource
	Launcher
	InstanceLister
	Describer
	Terminator
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
