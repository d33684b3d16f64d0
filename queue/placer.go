package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/policy/spot"
)

// PolicyPlacer places jobs with the policy engine over the offers of the
// configured providers. Offers are cached for OfferTTL, prepared as one
// policy.OfferSet, so that dispatch neither calls providers nor re-reads
// every offer per job. For a spot-then-on-demand job with a deadline
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
	// Spend reports what a project's attempts started since a time have
	// cost, in micros per currency (Store.Spend). When set, every budget
	// matching the job's project has the spend of its current period added
	// to its Spent before placing, so budgets hold as spend accrues.
	Spend func(ctx context.Context, project string, since time.Time) (map[string]int64, error)
	// Now is the clock; default time.Now.
	Now func() time.Time

	mu        sync.Mutex
	offers    []policy.Offer
	set       *policy.OfferSet
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
	offers, set, histories, err := p.currentOffers(ctx)
	if err != nil {
		return Placement{}, err
	}
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	rules, err := p.rulesWithSpend(ctx, pj.Project, now)
	if err != nil {
		return Placement{}, err
	}
	note := p.adviseTier(job, &pj, prior, offers, histories, now)
	var d policy.Decision
	if prior == nil {
		d, err = set.Place(pj, rules, now)
	} else {
		var previous policy.Decision
		if err := json.Unmarshal(prior.Placement.Decision, &previous); err != nil {
			return Placement{}, fmt.Errorf("reading the previous decision of job %s: %w", job.ID, err)
		}
		d, err = set.Replace(pj, rules, previous, historyOf(prior.Attempts), now)
	}
	var none *policy.NoPlacementError
	if errors.As(err, &none) {
		return Placement{}, &RejectionError{Reason: none.Error()}
	}
	if err != nil {
		return Placement{}, &RejectionError{Reason: SpecKeys(err).Error()}
	}
	if note != "" {
		d.Notes = append(d.Notes, note)
	}
	return placementOf(d)
}

// rulesWithSpend returns the rules with each budget that matches project
// charged with the project's spend in the budget's current period, converted
// into the base currency.
func (p *PolicyPlacer) rulesWithSpend(ctx context.Context, project string, now time.Time) (policy.Rules, error) {
	rules := p.Rules
	if p.Spend == nil || len(rules.Budgets) == 0 {
		return rules, nil
	}
	base := rules.WithDefaults().BaseCurrency
	rules.Budgets = slices.Clone(rules.Budgets)
	for i, b := range rules.Budgets {
		if ok, _ := path.Match(b.Project, project); !ok {
			continue
		}
		spend, err := p.spendSince(ctx, project, periodStart(b.Period, now))
		if err != nil {
			return rules, err
		}
		total := int64(0)
		if b.Spent.Micros != 0 {
			spend[b.Spent.Currency] += b.Spent.Micros
		}
		for currency, micros := range spend {
			v, ok := toBase(micros, currency, base, rules.ExchangeRates)
			if !ok {
				return rules, &RejectionError{Reason: fmt.Sprintf("budgets[%d]: project %s has spent %s in %s, which has no exchange rate to %s; add exchange_rates.%s", i, project, policy.Money{Micros: micros, Currency: currency}, currency, base, currency)}
			}
			total += v
		}
		rules.Budgets[i].Spent = policy.Money{Micros: total, Currency: base}
	}
	return rules, nil
}

// spendCache holds the spend read while placing one batch of submissions, so
// that a batch of one project costs one query; it lives no longer than the
// batch.
type spendCache struct {
	mu    sync.Mutex
	spend map[string]map[string]int64
}

type spendCacheKey struct{}

// withSpendCache returns a context whose placements share spend reads.
func withSpendCache(ctx context.Context) context.Context {
	return context.WithValue(ctx, spendCacheKey{}, &spendCache{spend: map[string]map[string]int64{}})
}

// spendSince returns a copy of the project's spend since a time, read once
// per batch when ctx carries a batch's cache.
func (p *PolicyPlacer) spendSince(ctx context.Context, project string, since time.Time) (map[string]int64, error) {
	cache, _ := ctx.Value(spendCacheKey{}).(*spendCache)
	key := project + "\x00" + since.String()
	if cache != nil {
		cache.mu.Lock()
		spend, ok := cache.spend[key]
		cache.mu.Unlock()
		if ok {
			return maps.Clone(spend), nil
		}
	}
	spend, err := p.Spend(ctx, project, since)
	if err != nil {
		return nil, err
	}
	if cache != nil {
		cache.mu.Lock()
		cache.spend[key] = maps.Clone(spend)
		cache.mu.Unlock()
	}
	return spend, nil
}

func toBase(micros int64, currency, base string, rates map[string]float64) (int64, bool) {
	if currency == base {
		return micros, true
	}
	for c, r := range rates {
		if strings.EqualFold(c, currency) {
			return int64(math.Round(float64(micros) * r)), true
		}
	}
	return 0, false
}

// periodStart is when the budget period containing now began (UTC); the
// zero time for a "total" budget.
func periodStart(period string, now time.Time) time.Time {
	now = now.UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	switch period {
	case "day":
		return day
	case "week":
		return day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
	case "month":
		return time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	case "quarter":
		return time.Date(now.Year(), now.Month()-(now.Month()-1)%3, 1, 0, 0, 0, 0, time.UTC)
	case "year":
		return time.Date(now.Year(), 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Time{}
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
	price := d.Chosen.Offer.PricePerHour
	return Placement{
		Pool: d.Chosen.Offer.Pool, Region: d.Chosen.Offer.Region,
		Residency: d.Residency.Class, Countries: d.Residency.Countries,
		PriceMicros: price.Micros, Currency: price.Currency, Decision: body,
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
func (p *PolicyPlacer) currentOffers(ctx context.Context) ([]policy.Offer, *policy.OfferSet, map[string]spot.PoolHistory, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.set == nil || time.Since(p.fetched) >= p.ttl() {
		var all []policy.Offer
		for _, s := range p.Sources {
			offers, err := s.Offers(ctx)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("asking %s for offers: %w", s.Name(), err)
			}
			all = append(all, offers...)
		}
		if err := policy.NormalizeOffers(all); err != nil {
			return nil, nil, nil, fmt.Errorf("checking the providers' offers: %w", err)
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
		p.offers, p.set, p.fetched = all, policy.NewOfferSet(all), time.Now()
	}
	histories := make(map[string]spot.PoolHistory, len(p.histories))
	for k, h := range p.histories {
		histories[k] = *h
	}
	return p.offers, p.set, histories, nil
}

// PolicyJob converts a job spec into the placement engine's requirements.
func PolicyJob(s *Spec) (policy.Job, error) {
	j := policy.Job{
		Project: s.Project, Labels: s.Labels, VCPU: s.Resources.CPU,
		MemoryGB:  int(math.Ceil(s.Resources.MemoryGB)),
		Tier:      policy.Tier(s.Placement.Tier),
		Providers: s.Placement.Providers, Regions: s.Placement.Regions, Residency: s.Placement.Residency,
		ExpectedDuration: time.Duration(s.ExpectedDuration), AllowGPUForCPU: s.Placement.AllowGPUForCPU,
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
		j.Inputs = append(j.Inputs, policy.Input{Name: name, Provider: in.Provider, Region: in.Region, Country: in.Country, Bytes: in.Bytes})
	}
	return j, nil
}
