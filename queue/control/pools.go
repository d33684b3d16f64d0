package control

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gpuq/gpuq/adapters"
)

// PoolLocation is where a pool's machines are: the region whose checkpoint
// store its workers write to and the region's country.
type PoolLocation struct {
	Region  string
	Country string
}

// PoolRegistry answers where a pool lies, from the control plane's own
// configuration, never from what a worker or a run message says.
type PoolRegistry interface {
	// PoolLocation reports where pool lies; ok is false for a pool the
	// control plane does not know.
	PoolLocation(ctx context.Context, pool string) (loc PoolLocation, ok bool, err error)
}

// OfferRegistry is the pool registry of the placer's offer sources (the
// same configuration placement uses). A pool once seen is remembered, so a
// pool whose offers vanish (no capacity) still has a location; an unknown
// pool makes it list the offers again, at most once per Refresh.
type OfferRegistry struct {
	Sources []adapters.OfferSource
	// Refresh is the least time between two listings. Default 5s.
	Refresh time.Duration

	mu     sync.Mutex
	pools  map[string]PoolLocation
	listed time.Time
}

// PoolLocation implements PoolRegistry.
func (r *OfferRegistry) PoolLocation(ctx context.Context, pool string) (PoolLocation, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if loc, ok := r.pools[pool]; ok {
		return loc, true, nil
	}
	refresh := r.Refresh
	if refresh <= 0 {
		refresh = 5 * time.Second
	}
	if !r.listed.IsZero() && time.Since(r.listed) < refresh {
		return PoolLocation{}, false, nil
	}
	r.listed = time.Now()
	if r.pools == nil {
		r.pools = map[string]PoolLocation{}
	}
	var errs []error
	for _, src := range r.Sources {
		offers, err := src.Offers(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("offers of %s: %w", src.Name(), err))
			continue
		}
		for _, o := range offers {
			r.pools[o.Pool] = PoolLocation{Region: o.Region, Country: o.Country}
		}
	}
	loc, ok := r.pools[pool]
	if !ok && len(errs) > 0 {
		return PoolLocation{}, false, fmt.Errorf("locating pool %s: %v", pool, errs[0])
	}
	return loc, ok, nil
}
