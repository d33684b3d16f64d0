package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
)

// PolicyPlacer places jobs with the policy engine over the offers of the
// configured providers. Offers are cached for OfferTTL, prepared as one
// policy.OfferSet, so that dispatch neither calls providers nor re-reads
// every offer per job.
type PolicyPlacer struct {
	Sources []adapters.OfferSource
	Rules   policy.Rules
	// OfferTTL is how long offers are reused. Default 10s.
	OfferTTL time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time

	mu      sync.Mutex
	offers  *policy.OfferSet
	fetched time.Time
}

// Place implements Placer.
func (p *PolicyPlacer) Place(ctx context.Context, job *Job, previous *Placement) (Placement, error) {
	pj, err := PolicyJob(job.Spec)
	if err != nil {
		return Placement{}, &RejectionError{Reason: err.Error()}
	}
	offers, err := p.currentOffers(ctx)
	if err != nil {
		return Placement{}, err
	}
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	d, err := offers.Place(pj, p.Rules, now)
	var none *policy.NoPlacementError
	if errors.As(err, &none) {
		return Placement{}, &RejectionError{Reason: none.Error()}
	}
	if err != nil {
		return Placement{}, &RejectionError{Reason: err.Error()}
	}
	return placementOf(d)
}

func placementOf(d policy.Decision) (Placement, error) {
	if d.Chosen == nil {
		return Placement{}, &RejectionError{Reason: "no placement chosen"}
	}
	body, err := json.Marshal(d)
	if err != nil {
		return Placement{}, err
	}
	return Placement{
		Pool: d.Chosen.Offer.Pool, Region: d.Chosen.Offer.Region,
		Residency: d.Residency.Class, Countries: d.Residency.Countries, Decision: body,
	}, nil
}

func (p *PolicyPlacer) currentOffers(ctx context.Context) (*policy.OfferSet, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ttl := p.OfferTTL
	if ttl == 0 {
		ttl = 10 * time.Second
	}
	if p.offers != nil && time.Since(p.fetched) < ttl {
		return p.offers, nil
	}
	var all []policy.Offer
	for _, s := range p.Sources {
		offers, err := s.Offers(ctx)
		if err != nil {
			return nil, fmt.Errorf("asking %s for offers: %w", s.Name(), err)
		}
		all = append(all, offers...)
	}
	p.offers, p.fetched = policy.NewOfferSet(all), time.Now()
	return p.offers, nil
}

// PolicyJob converts a job spec into the placement engine's requirements.
func PolicyJob(s *Spec) (policy.Job, error) {
	j := policy.Job{
		Project: s.Project, Labels: s.Labels, VCPU: s.Resources.CPU,
		MemoryGB:  int(math.Ceil(s.Resources.MemoryGB)),
		Tier:      policy.Tier(s.Placement.Tier),
		Providers: s.Placement.Providers, Regions: s.Placement.Regions, Residency: s.Placement.Residency,
		ExpectedDuration: time.Duration(s.ExpectedDuration),
	}
	if g := s.Resources.GPU; g != nil {
		j.GPUCount, j.Cards, j.MinGPUMemoryGB = g.Count, g.Cards, g.MemoryGB
	}
	if s.Deadline != nil {
		j.Deadline = *s.Deadline
	}
	if m := s.Budget.MaxPricePerHour; m != "" {
		v, err := policy.ParseMoney(m)
		if err != nil {
			return j, fmt.Errorf("spec.budget.max_price_per_hour: %w", err)
		}
		j.MaxPricePerHour = &v
	}
	if m := s.Budget.Total; m != "" {
		v, err := policy.ParseMoney(m)
		if err != nil {
			return j, fmt.Errorf("spec.budget.total: %w", err)
		}
		j.Budget = &v
	}
	for _, in := range s.Inputs {
		j.Inputs = append(j.Inputs, policy.Input{Name: in.URI, Region: in.Region, Bytes: in.Bytes})
	}
	return j, nil
}
