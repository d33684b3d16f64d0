package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"sync"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/policy/spot"
	"github.com/gpuq/gpuq/queue"
)

// Placer decides where a job runs. PolicyPlacer implements it; the scheduler
// needs nothing else from placement. prior is nil on the first placement; a
// re-placement passes the current placement and the attempts so far, so that
// pools that preempted the job can be avoided. A job that no placement
// satisfies is refused with a *queue.RejectionError.
type Placer interface {
	Place(ctx context.Context, job *queue.Job, prior *Prior) (queue.Placement, error)
}

// Prior is what a re-placement knows about a job's past.
type Prior struct {
	Placement queue.Placement
	Attempts  []queue.Attempt
	// Events are what happened to the job outside its attempts, such as a
	// pool that could not launch capacity for it (policy.EventNoCapacity).
	Events []policy.Event
}

// PolicyPlacer places jobs with the policy engine over the offers of the
// configured providers. Offers are cached for OfferTTL, prepared as one
// policy.OfferSet, so that dispatch neither calls providers nor re-reads
// every offer per job. Budgets are charged with the spend Spend reports; the
// placement carries budget guards that the store re-checks when it commits.
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
	// cost, in micros per currency (store.Store.Spend). When set, every
	// budget matching the job's project is charged with the spend of its
	// current period before placing, so budgets hold as spend accrues.
	Spend func(ctx context.Context, project string, since time.Time) (map[string]int64, error)
	// Now is the clock; default time.Now.
	Now func() time.Time

	mu        sync.Mutex
	offers    *Offers
	fetched   time.Time
	histories map[string]*spot.PoolHistory
}

// WithDefaults returns the placer's settings with every unset default filled
// in; the cache is not copied.
func (p *PolicyPlacer) WithDefaults() *PolicyPlacer {
	out := &PolicyPlacer{Sources: p.Sources, Rules: p.Rules, OfferTTL: p.OfferTTL, Strategy: p.Strategy, Spend: p.Spend, Now: p.Now}
	if out.OfferTTL == 0 {
		out.OfferTTL = DefaultOfferTTL
	}
	if out.Strategy == nil {
		out.Strategy = spot.NewGpuq()
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return out
}

func (p *PolicyPlacer) validate() error {
	if p.OfferTTL < 0 {
		return fmt.Errorf("placer.offer_ttl: must not be negative, got %s", p.OfferTTL)
	}
	return nil
}

// Place implements Placer: Decide over the cached offers, with the budgets
// charged with the project's spend (read once per scheduler batch).
func (p *PolicyPlacer) Place(ctx context.Context, job *queue.Job, prior *Prior) (queue.Placement, error) {
	cfg := p.WithDefaults()
	if err := cfg.validate(); err != nil {
		return queue.Placement{}, err
	}
	pj, err := PolicyJob(job.Spec)
	if err != nil {
		return queue.Placement{}, &queue.RejectionError{Reason: err.Error()}
	}
	offers, err := p.currentOffers(ctx, cfg.OfferTTL)
	if err != nil {
		return queue.Placement{}, err
	}
	now := cfg.Now()
	q := Question{Job: pj, SubmittedAt: job.SubmittedAt, Prior: prior, Rules: cfg.Rules, Offers: offers,
		Strategy: cfg.Strategy, Tick: cfg.OfferTTL, Now: now}
	if p.Spend != nil {
		if q.Spend, err = p.spendSnapshot(ctx, pj.Project, cfg.Rules, now); err != nil {
			return queue.Placement{}, err
		}
	}
	d, err := Decide(q)
	var none *policy.NoPlacementError
	if errors.As(err, &none) {
		return queue.Placement{}, &queue.RejectionError{Reason: none.Error()}
	}
	if err != nil {
		return queue.Placement{}, &queue.RejectionError{Reason: err.Error()}
	}
	pl, err := placementOf(d)
	if err != nil {
		return pl, err
	}
	if p.Spend != nil {
		if pl.Guards, err = guardsOf(cfg.Rules, pj.Project, d, now); err != nil {
			return pl, err
		}
	}
	return pl, nil
}

// spendSnapshot reads the project's spend for each period its budgets need,
// once per batch when ctx carries a batch's cache.
func (p *PolicyPlacer) spendSnapshot(ctx context.Context, project string, rules policy.Rules, now time.Time) (policy.SpendSince, error) {
	spend := map[time.Time]map[string]int64{}
	for _, since := range rules.BudgetPeriods(project, now) {
		s, err := p.spendSince(ctx, project, since)
		if err != nil {
			return nil, err
		}
		spend[since] = s
	}
	return func(since time.Time) map[string]int64 { return spend[since] }, nil
}

// guardsOf turns the decision's budget guards into the ones the store
// re-checks, with the exchange rates to convert spend at.
func guardsOf(rules policy.Rules, project string, d policy.Decision, now time.Time) ([]queue.BudgetGuard, error) {
	guards, err := rules.BudgetGuards(project, d, now)
	if err != nil || len(guards) == 0 {
		return nil, err
	}
	conv, err := rules.Converter()
	if err != nil {
		return nil, err
	}
	currencies, micros := conv.Rates()
	rates := make(map[string]int64, len(currencies))
	for i, c := range currencies {
		rates[c] = micros[i]
	}
	out := make([]queue.BudgetGuard, len(guards))
	for i, g := range guards {
		out[i] = queue.BudgetGuard{Project: g.Project, Since: g.Since, LimitMicros: g.Limit, CostMicros: g.Cost,
			Rates: rates, Reason: rules.GuardReason(g)}
	}
	return out, nil
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

// currentOffers returns the cached offers, refreshing them (and observing
// each spot pool's availability once) when they are older than ttl.
func (p *PolicyPlacer) currentOffers(ctx context.Context, ttl time.Duration) (*Offers, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.offers == nil || time.Since(p.fetched) >= ttl {
		all, err := CollectOffers(ctx, p.Sources)
		if err != nil {
			return nil, err
		}
		if p.histories == nil {
			p.histories = map[string]*spot.PoolHistory{}
		}
		for _, o := range all.List {
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
	out := *p.offers
	out.Histories = histories
	return &out, nil
}

// progress estimates the compute a job has banked: for each attempt, the
// time from its start to its last heartbeat, counted only for attempts that
// were handed back or lost (their checkpoints carry the work on).
func progress(attempts []queue.Attempt) time.Duration {
	var done time.Duration
	for _, a := range attempts {
		if a.Outcome == queue.OutcomePreempted || a.Outcome == queue.OutcomeLost {
			done += a.HeartbeatAt.Sub(a.StartedAt)
		}
	}
	return done
}

// historyOf turns a job's attempts into the policy's preemption history.
func historyOf(attempts []queue.Attempt) policy.History {
	var h policy.History
	for _, a := range attempts {
		if a.Outcome != queue.OutcomePreempted && a.Outcome != queue.OutcomeLost {
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

func placementOf(d policy.Decision) (queue.Placement, error) {
	if d.Chosen == nil {
		return queue.Placement{}, &queue.RejectionError{Reason: "no placement chosen"}
	}
	body, err := json.Marshal(d)
	if err != nil {
		return queue.Placement{}, err
	}
	price := d.Chosen.Offer.PricePerHour
	return queue.Placement{
		Pool: d.Chosen.Offer.Pool, Region: d.Chosen.Offer.Region,
		Residency: d.Residency.Class, Countries: d.Residency.Countries,
		PriceMicros: price.Micros, Currency: price.Currency, Decision: body,
	}, nil
}

// PolicyJob converts a job spec into the placement engine's requirements.
func PolicyJob(s *queue.Spec) (policy.Requirements, error) {
	j := policy.Requirements{
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
