package adapters_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
)

// staticSource is an OfferSource that returns fixed offers or an error.
type staticSource struct {
	name   string
	offers []policy.Offer
	err    error
}

func (s staticSource) Name() string { return s.name }
func (s staticSource) Offers(context.Context) ([]policy.Offer, error) {
	return s.offers, s.err
}

func offer(pool string) policy.Offer {
	return policy.Offer{Provider: "p", Pool: pool, Tier: policy.TierOnDemand, PricePerHour: policy.Money{Micros: 1, Currency: "EUR"}}
}

func TestCollectOffersKeepsHealthySourcesAndReportsTheRest(t *testing.T) {
	t.Parallel()
	quota := &adapters.ProviderError{Provider: "aws", Op: "offers", Kind: adapters.ErrQuotaExceeded}
	offers, err := adapters.CollectOffers(context.Background(),
		staticSource{name: "a", offers: []policy.Offer{offer("a1"), offer("a2")}},
		staticSource{name: "aws", err: quota},
		staticSource{name: "bad", offers: []policy.Offer{offer("ok"), offer("not.ok")}},
	)
	if len(offers) != 2 || offers[0].Pool != "a1" {
		t.Errorf("offers = %+v", offers)
	}
	if !errors.Is(err, adapters.ErrQuotaExceeded) {
		t.Errorf("err = %v, want it to wrap ErrQuotaExceeded", err)
	}
	if err == nil || !strings.Contains(err.Error(), `offers from bad: offer 1 (pool "not.ok"): pool:`) {
		t.Errorf("err = %v, want it to name the malformed offer", err)
	}
}

func TestProviderErrorMatchesItsKindAndCause(t *testing.T) {
	t.Parallel()
	cause := errors.New("HTTP 503")
	err := error(&adapters.ProviderError{Provider: "scaleway", Pool: "par-h100", Op: "launch", Kind: adapters.ErrTransient, Err: cause, RetryAfter: 30 * time.Second})
	if !errors.Is(err, adapters.ErrTransient) || !errors.Is(err, cause) || errors.Is(err, adapters.ErrCapacityUnavailable) {
		t.Errorf("errors.Is does not follow kind and cause")
	}
	if want := "scaleway: launch in pool par-h100: transient provider error: HTTP 503 (retry after 30s)"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
}
