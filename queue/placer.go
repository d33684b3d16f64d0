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
	"github.com/gpuq/gpuq/policy/spot"
)

// PolicyPlacer places jobs with the policy engine over the offers of the
// configured providers. Offers are cached for OfferTTL so that dispatch does
// not call providers per job. For a spot-then-on-demand job with a deadline
// it first asks the deadline-aware spot strategy whether the job should run
// on spot or on on-demand capacity now.
type PolicyPlacer struct {
	Sources []adapters.OfferSource
	Rules   policy.Rules
	// OfferTTL is how long offers are reused; each refresh is one
	// observation of every spot pool's availability. Default 10s.
	OfferTTL time.Duration
	// Strategy is the spot strategy consulted for jobs with a deadline.
	// Default: gpuq's own.
	Strategy spot.Strategy
	// Now is the clock; default time.Now.
	Now func() time.Time

	mu        sync.Mutex
	offers    []policy.Offer
	fetched   time.Time
	histories map[string]*spot.PoolHistory
}

// Place implements Placer: policy.Place for a new job, policy.Replace with
// the job's preemption history for a re-placement.
func (p *PolicyPlacer) Place(ctx context.Context, job *Job, prior *Prior) (Placement, error) {
	pj, err := PolicyJob(job.Spec)
	if err != nil {
		return Placement{}, &RejectionError{Reason: err.Error()}
	}
	offers, histories, err := p.currentOffers(ctx)
	if err != nil {
		return Placement{}, err
	}
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	note := p.adviseTier(job, &pj, prior, offers, histories, now)
	var d policy.Decision
	if prior == nil {
		d, err = policy.Place(pj, offers, p.Rules, now)
	} else {
		var previous policy.Decision
		if err := json.Unmarshal(prior.Placement.Decision, &previous); err != nil {
			return Placement{}, fmt.Errorf("reading the previous decision of job %s: %w", job.ID, err)
		}
		d, err = policy.Replace(pj, offers, p.Rules, previous, historyOf(prior.Attempts), now)
	}
	var none *policy.NoPlacementError
	if errors.As(err, &none) {
		return Placement{}, &RejectionError{Reason: none.Error()}
	}
	if err != nil {
		return Placement{}, &RejectionError{Reason: err.Error()}
	}
	if note != "" {
		d.Notes = append(d.Notes, note)
	}
	return placementOf(d)
}

// adviseTier narrows a deadline job's tier to what the spot strategy advises
// now, and says so in a note for the decision.
func (p *PolicyPlacer) adviseTier(job *Job, pj *policy.Job, prior *Prior, offers []policy.Offer, histories map[string]spot.PoolHistory, now time.Time) string {
	if pj.Tier != policy.TierSpotThenOnDemand || pj.Deadline.IsZero() || pj.ExpectedDuration <= 0 {
		return ""
	}
	strategy := p.Strategy
	if strategy == nil {
		strategy = spot.NewGpuq()
	}
	st := spot.State{
		Elapsed:  now.Sub(job.SubmittedAt),
		Compute:  pj.ExpectedDuration,
		Deadline: pj.Deadline.Sub(job.SubmittedAt),
		Overhead: p.Rules.WithDefaults().Spot.RestartOverhead,
		Tick:     p.ttl(),
		Current:  spot.Placement{Kind: spot.Wait},
	}
	if prior != nil {
		st.Done = min(progress(prior.Attempts), st.Compute)
	}
	seen := map[string]bool{}
	for _, o := range offers {
		if o.Tier != policy.TierSpot || seen[o.Pool] {
			continue
		}
		seen[o.Pool] = true
		st.Pools = append(st.Pools, spot.Pool{ID: o.Pool, Available: o.Availability != policy.Unavailable, History: histories[o.Pool]})
	}
	advice, err := spot.Advise(strategy, st)
	if err != nil {
		return fmt.Sprintf("spot strategy %s not consulted: %v", strategy.Name(), err)
	}
	switch advice.Kind {
	case spot.OnDemand:
		pj.Tier = policy.TierOnDemand
	default:
		// Spot now, or wait for spot: either way the job queues on spot.
		pj.Tier = policy.TierSpot
	}
	return fmt.Sprintf("spot strategy %s advises %s: %s", strategy.Name(), advice.Kind, advice.Reason)
}

// progress estimates the compute a job has banked: for each attempt, the
// time from its start to its last heartbeat, counted only for attempts that
// were handed back or lost (their checkpoints carry the work on).
func progress(attempts []Attempt) time.Duration {
	var done time.Duration
	for _, a := range attempts {
		if a.Outcome == OutcomePreempted || a.Outcome == OutcomeLost {
			done += a.HeartbeatAt.Sub(a.StartedAt)
		}
	}
	return done
}

// historyOf turns a job's attempts into the policy's preemption history.
func historyOf(attempts []Attempt) policy.History {
	var h policy.History
	for _, a := range attempts {
		if a.Outcome != OutcomePreempted && a.Outcome != OutcomeLost {
			continue
		}
		at := a.HeartbeatAt
		if a.EndedAt != nil {
			at = *a.EndedAt
		}
		h.Events = append(h.Events, policy.Event{Pool: a.Pool, Kind: policy.EventPreempted, At: at})
	}
	return h
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

func (p *PolicyPlacer) ttl() time.Duration {
	if p.OfferTTL == 0 {
		return 10 * time.Second
	}
	return p.OfferTTL
}

// currentOffers returns the cached offers, refreshing them (and observing
// each spot pool's availability once) when they are older than OfferTTL.
func (p *PolicyPlacer) currentOffers(ctx context.Context) ([]policy.Offer, map[string]spot.PoolHistory, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.offers == nil || time.Since(p.fetched) >= p.ttl() {
		var all []policy.Offer
		for _, s := range p.Sources {
			offers, err := s.Offers(ctx)
			if err != nil {
				return nil, nil, fmt.Errorf("asking %s for offers: %w", s.Name(), err)
			}
			all = append(all, offers...)
		}
		if p.histories == nil {
			p.histories = map[string]*spot.PoolHistory{}
		}
		for _, o := range all {
			if o.Tier != policy.TierSpot {
				continue
			}
			h := p.histories[o.Pool]
			if h == nil {
				h = &spot.PoolHistory{}
				p.histories[o.Pool] = h
			}
			h.Observe(o.Availability != policy.Unavailable)
		}
		p.offers, p.fetched = all, time.Now()
	}
	histories := make(map[string]spot.PoolHistory, len(p.histories))
	for k, h := range p.histories {
		histories[k] = *h
	}
	return p.offers, histories, nil
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
		name := in.Name
		if name == "" {
			name = in.URI
		}
		j.Inputs = append(j.Inputs, policy.Input{Name: name, Region: in.Region, Bytes: in.Bytes})
	}
	return j, nil
}
