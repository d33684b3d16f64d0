package control

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/policy/spot"
	"github.com/gpuq/gpuq/queue"
)

// Offers is the offer set a decision is made among: the offers as the
// sources gave them, prepared once as a policy.OfferSet, and the observed
// availability of each spot pool.
type Offers struct {
	List      []policy.Offer
	Set       *policy.OfferSet
	Histories map[string]spot.PoolHistory

	// snapshot is shared by the copies a placer hands out per decision.
	snapshot *snapshot
}

// DefaultOfferTTL is how long offers are reused by default, and the step at
// which the spot strategy is asked again.
const DefaultOfferTTL = 10 * time.Second

// NewOffers prepares offers for deciding, with each spot pool's availability
// observed once, as a placer's first refresh observes it.
func NewOffers(offers []policy.Offer) *Offers {
	h := map[string]spot.PoolHistory{}
	for _, o := range offers {
		if o.Tier != policy.TierSpot {
			continue
		}
		ph := h[o.Pool]
		ph.Observe(o.Availability != policy.Unavailable)
		h[o.Pool] = ph
	}
	return &Offers{List: offers, Set: policy.NewOfferSet(offers), Histories: h, snapshot: &snapshot{}}
}

// CollectOffers asks every source for its offers, checks them as one set
// (policy.NormalizeOffers) and prepares them: the one way the scheduler and
// `gpuq plan` build their offer set. A source that fails, or offers that
// are malformed or share a pool id, fail the whole set, so that no decision
// is made on part of it.
func CollectOffers(ctx context.Context, sources []adapters.OfferSource) (*Offers, error) {
	offers, err := adapters.CollectOffers(ctx, sources...)
	if err != nil {
		return nil, err
	}
	if err := policy.NormalizeOffers(offers); err != nil {
		return nil, fmt.Errorf("checking the providers' offers: %w", err)
	}
	return NewOffers(offers), nil
}

// Question is everything one placement decision depends on.
type Question struct {
	Job policy.Requirements
	// SubmittedAt is when the job was submitted; the spot strategy counts
	// its deadline from there.
	SubmittedAt time.Time
	// Prior is nil on a first placement.
	Prior *Prior
	// Running, when set, is the attempt running the job on on-demand now:
	// the question is then whether to leave it for spot (Rebalancer). Its
	// time so far, less the restart overhead, counts as done.
	Running *queue.Attempt
	// Rules are the placement rules before any spend is charged.
	Rules policy.Rules
	// Spend, when not nil, charges each matching budget with the project's
	// spend of the budget's period.
	Spend  policy.SpendSince
	Offers *Offers
	// Strategy is the spot strategy for deadline jobs; nil: gpuq's look-ahead.
	Strategy spot.Strategy
	// Tick is how often offers are refreshed (the strategy's step).
	// Default DefaultOfferTTL.
	Tick time.Duration
	Now  time.Time
}

// Decide is the placement decision the scheduler, the replacer and `gpuq
// plan` all make: the spot strategy narrows a deadline job's tier, budgets
// are charged with spend, and policy places the job (or re-places it after
// Prior).
func Decide(q Question) (policy.Decision, error) {
	d, _, err := decideQuestion(q)
	return d, err
}

// decideQuestion is Decide, also returning the recipe that replays the
// decision over the same offers.
func decideQuestion(q Question) (policy.Decision, Recipe, error) {
	rules, err := q.Rules.ChargeBudgets(q.Job.Project, q.Now, q.Spend)
	if err != nil {
		return policy.Decision{}, Recipe{}, err
	}
	if q.Tick == 0 {
		q.Tick = DefaultOfferTTL
	}
	job := q.Job
	tq := policy.TierQuestion{Strategy: q.Strategy, SubmittedAt: q.SubmittedAt, Now: q.Now, Tick: q.Tick,
		Offers: q.Offers.List, Histories: q.Offers.Histories}
	if q.Prior != nil {
		tq.Banked = progress(q.Prior.Attempts)
		tq.Checkpoint, tq.Move = checkpointMove(q.Offers.List, q.Rules, q.Prior.Checkpoint)
	}
	if q.Running != nil {
		over := q.Rules.WithDefaults().Spot.RestartOverhead
		ran := max(q.Now.Sub(q.Running.StartedAt), 0)
		tq.OnDemand = true
		tq.Banked += max(ran-over, 0)
		tq.Warmup = max(over-ran, 0)
	}
	tq.Prices = strategyPrices(q.Offers.List, q.Rules)
	note := policy.AdviseTier(&job, q.Rules, tq)
	r := Recipe{Job: job, Rules: rules, Now: q.Now}
	if note != "" {
		r.Notes = []string{note}
	}
	if q.Prior != nil {
		r.Previous = q.Prior.Placement.Decision
		history := historyOf(q.Prior.Attempts)
		history.Events = append(history.Events, q.Prior.Events...)
		r.History = &history
	}
	d, err := r.place(q.Offers.Set)
	var none *policy.NoPlacementError
	if errors.As(err, &none) {
		return d, r, err
	}
	if err != nil {
		// What is wrong is the job's, against these rules (an undefined
		// residency class, inputs outside it): name the spec's keys.
		return d, r, queue.SpecKeys(err)
	}
	return d, r, nil
}

// checkpointMove returns the spot pool in the region of the job's latest
// checkpoint and what moving the checkpoint out of it costs: its bytes at
// the region's egress price, in the policy's base currency. The policy has
// no transfer rate, so the move's time is left to the restart overhead.
// Empty and zero when there is no checkpoint or no spot pool in its region.
func checkpointMove(offers []policy.Offer, rules policy.Rules, cp *queue.Checkpoint) (string, spot.Move) {
	if cp == nil || cp.Region == "" {
		return "", spot.Move{}
	}
	conv, err := rules.Converter()
	if err != nil {
		return "", spot.Move{}
	}
	for _, o := range offers {
		if o.Tier != policy.TierSpot || o.Region != cp.Region {
			continue
		}
		var move spot.Move
		if o.EgressPerGB != nil {
			if perGB, ok := conv.ToBase(*o.EgressPerGB); ok {
				move.Micros = int64(math.Ceil(float64(perGB) * float64(cp.Bytes) / 1e9))
			}
		}
		return o.Pool, move
	}
	return "", spot.Move{}
}

// strategyPrices returns the cheapest spot and on-demand prices among
// offers, in the policy's base currency: what the strategy weighs a move's
// egress against. Zero when either tier has no convertible price.
func strategyPrices(offers []policy.Offer, rules policy.Rules) spot.Prices {
	conv, err := rules.Converter()
	if err != nil {
		return spot.Prices{}
	}
	var p spot.Prices
	for _, o := range offers {
		micros, ok := conv.ToBase(o.PricePerHour)
		if !ok || o.Availability == policy.Unavailable && o.Tier == policy.TierOnDemand {
			continue
		}
		switch o.Tier {
		case policy.TierSpot:
			if p.Spot == 0 || micros < p.Spot {
				p.Spot = micros
			}
		case policy.TierOnDemand:
			if p.OnDemand == 0 || micros < p.OnDemand {
				p.OnDemand = micros
			}
		}
	}
	if p.Spot == 0 || p.OnDemand == 0 {
		return spot.Prices{}
	}
	p.Currency = conv.Base()
	return p
}
