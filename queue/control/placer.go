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

	"github.com/google/uuid"

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
	// Checkpoint is the job's latest checkpoint; nil when it has none or
	// the caller did not look (PolicyPlacer.Checkpoints then looks).
	Checkpoint *queue.Checkpoint
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
	// Policy, when set, gives the rules in effect for each placement
	// (a PolicyWatch: the latest version an admin set), and Rules is
	// unused. Reading it costs no round trip.
	Policy RulesSource
	// OfferTTL is how long offers are reused; each refresh is one
	// observation of every spot pool's availability. Default 10s.
	OfferTTL time.Duration
	// Strategy is the spot strategy consulted for jobs with a deadline.
	// Default: gpuq's look-ahead (spot.NewLookAhead).
	Strategy spot.Strategy
	// Spend reports what a project's attempts started since a time have
	// cost, in micros per currency (store.Store.Spend). When set, every
	// budget matching the job's project is charged with the spend of its
	// current period before placing, so budgets hold as spend accrues.
	Spend func(ctx context.Context, project string, since time.Time) (map[string]int64, error)
	// History, when set, is where every pool's availability is recorded
	// and read back (store.Store): each offer refresh is recorded there, and
	// the spot strategy reads the history every server has recorded, so a
	// restarted or second server is not blind. Without it the placer keeps
	// the history of its own refreshes, in memory.
	History PoolHistory
	// Checkpoints lists a job's checkpoints (store.Store.Checkpoints).
	// When set, a re-placement tells the spot strategy which zone holds
	// the latest checkpoint, so that it weighs moving it.
	Checkpoints func(ctx context.Context, id uuid.UUID) ([]queue.Checkpoint, error)
	// Outputs reads where the jobs a job reads the outputs of (spec.inputs'
	// job entries) were placed and their outputs stored (store.Store): the
	// job is placed inside each one's residency, its egress priced from
	// where they lie. Without it such a job is rejected.
	Outputs OutputsSource
	// Now is the clock; default time.Now.
	Now func() time.Time

	mu        sync.Mutex
	offers    *Offers
	fetched   time.Time
	histories map[string]spot.PoolHistory
}

// OutputsSource reads a job, its latest placement and its outputs' record
// (store.Store); each returns queue.ErrNotFound when there is none.
type OutputsSource interface {
	Job(ctx context.Context, id uuid.UUID) (*queue.Job, error)
	LatestPlacement(ctx context.Context, id uuid.UUID) (*queue.Placement, error)
	Result(ctx context.Context, id uuid.UUID) (*queue.ArchiveRecord, error)
}

// PoolHistory records every pool's availability and reads it back, shared
// by all servers. Summaries count ticks of HistoryTick each.
type PoolHistory interface {
	ObservePools(ctx context.Context, at time.Time, obs []queue.PoolObservation) error
	PoolSummaries(ctx context.Context, since time.Time) (map[string]queue.PoolBucket, error)
	HistoryTick() time.Duration
}

// PoolEventRecorder records what launches and preemptions say of a pool's
// capacity (store.Store): what launches capacity feeds it. The autoscaler
// also observes every pool offered at each pass, so that a pool's history
// goes on while no job is being placed.
type PoolEventRecorder interface {
	RecordPoolEvent(ctx context.Context, e queue.PoolEvent) error
	ObservePools(ctx context.Context, at time.Time, obs []queue.PoolObservation) error
}

// WithDefaults returns the placer's settings with every unset default filled
// in; the cache is not copied.
func (p *PolicyPlacer) WithDefaults() *PolicyPlacer {
	out := &PolicyPlacer{Sources: p.Sources, Rules: p.Rules, Policy: p.Policy, OfferTTL: p.OfferTTL, Strategy: p.Strategy, Spend: p.Spend,
		History: p.History, Checkpoints: p.Checkpoints, Outputs: p.Outputs, Now: p.Now}
	if out.OfferTTL == 0 {
		out.OfferTTL = DefaultOfferTTL
	}
	if out.Strategy == nil {
		out.Strategy = spot.NewLookAhead()
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	if out.Policy != nil {
		out.Rules = out.Policy.Rules()
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
	if err := InputData(ctx, cfg.Outputs, job.Spec, &pj); err != nil {
		return queue.Placement{}, err
	}
	offers, err := p.currentOffers(ctx, cfg.OfferTTL, cfg.Now)
	if err != nil {
		return queue.Placement{}, err
	}
	if prior != nil && prior.Checkpoint == nil && p.Checkpoints != nil {
		cps, err := p.Checkpoints(ctx, job.ID)
		if err != nil {
			return queue.Placement{}, fmt.Errorf("reading the checkpoints of job %s: %w", job.ID, err)
		}
		if len(cps) > 0 {
			withCheckpoint := *prior
			withCheckpoint.Checkpoint = &cps[len(cps)-1]
			prior = &withCheckpoint
		}
	}
	now := cfg.Now()
	q := Question{Job: pj, SubmittedAt: job.SubmittedAt, Prior: prior, Rules: cfg.Rules, Offers: offers,
		Strategy: cfg.Strategy, Tick: cfg.OfferTTL, Now: now}
	if p.Spend != nil {
		if q.Spend, err = p.spendSnapshot(ctx, pj.Project, cfg.Rules, now); err != nil {
			return queue.Placement{}, err
		}
	}
	d, recipe, err := decideQuestion(q)
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
	if pl.Replay, err = replayOf(offers, recipe); err != nil {
		return pl, err
	}
	if p.Spend != nil {
		if pl.Guards, err = guardsOf(cfg.Rules, pj.Project, d, now); err != nil {
			return pl, err
		}
	}
	return pl, nil
}

// InputData adds to pj what the outputs of the jobs spec reads (its
// inputs' job entries) bind it to: each one's residency, as its latest
// placement recorded it, and where they are stored, for egress. A job that
// finished leaving no outputs (one of spec.after_ended that did not
// succeed, or one that left none) binds it to nothing; one that has not
// finished yet (a plan made before it has) binds it to the residency its
// outputs will have. Without src, a spec reading a job's outputs is
// rejected.
func InputData(ctx context.Context, src OutputsSource, spec *queue.Spec, pj *policy.Requirements) error {
	for i, in := range spec.Inputs {
		if in.Job == "" {
			continue
		}
		if src == nil {
			return &queue.RejectionError{Reason: fmt.Sprintf("spec.inputs[%d].job: this control plane cannot read where a job's outputs are stored", i)}
		}
		id, err := uuid.Parse(in.Job)
		if err != nil {
			return &queue.RejectionError{Reason: fmt.Sprintf("spec.inputs[%d].job: %v", i, err)}
		}
		j, err := src.Job(ctx, id)
		if errors.Is(err, queue.ErrNotFound) || err == nil && j.Project != spec.Project {
			return &queue.RejectionError{Reason: fmt.Sprintf("spec.inputs[%d].job: no job %s in project %s", i, id, spec.Project)}
		}
		if err != nil {
			return fmt.Errorf("reading job %s: %w", id, err)
		}
		by := fmt.Sprintf("inputs[%d] (job %s)", i, id)
		rec, err := src.Result(ctx, id)
		switch {
		case err == nil:
			pj.Inputs = append(pj.Inputs, policy.Input{Name: by, Region: rec.Region, Bytes: rec.Bytes})
		case !errors.Is(err, queue.ErrNotFound):
			return fmt.Errorf("reading the outputs of job %s: %w", id, err)
		case j.State.Terminal():
			continue
		}
		pl, err := src.LatestPlacement(ctx, id)
		if errors.Is(err, queue.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading the placement of job %s: %w", id, err)
		}
		if pl.Residency != "" || len(pl.Countries) > 0 {
			pj.DataResidency = append(pj.DataResidency, policy.DataResidency{Class: pl.Residency, Countries: pl.Countries, By: by})
		}
	}
	return nil
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
// each pool's availability once) when they are older than ttl.
func (p *PolicyPlacer) currentOffers(ctx context.Context, ttl time.Duration, now func() time.Time) (*Offers, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := now()
	if p.offers == nil || at.Sub(p.fetched) >= ttl {
		all, err := CollectOffers(ctx, p.Sources)
		if err != nil {
			return nil, err
		}
		if p.History != nil {
			p.histories, err = p.recordedHistories(ctx, all.List, at, ttl)
			if err != nil {
				return nil, err
			}
		} else {
			if p.histories == nil {
				p.histories = map[string]spot.PoolHistory{}
			}
			for _, o := range all.List {
				if o.Tier == policy.TierSpot {
					h := p.histories[o.Pool]
					h.Observe(o.Availability != policy.Unavailable)
					p.histories[o.Pool] = h
				}
			}
		}
		p.offers, p.fetched = all, at
	}
	out := *p.offers
	out.Histories = maps.Clone(p.histories)
	return &out, nil
}

// recordedHistories records one observation of every pool offered and reads
// back the spot pools' histories as every server recorded them, in ticks of
// the placer's tick.
func (p *PolicyPlacer) recordedHistories(ctx context.Context, offers []policy.Offer, at time.Time, tick time.Duration) (map[string]spot.PoolHistory, error) {
	seen := map[string]bool{}
	var obs []queue.PoolObservation
	for _, o := range offers {
		if seen[o.Pool] {
			continue
		}
		seen[o.Pool] = true
		obs = append(obs, queue.PoolObservation{Pool: o.Pool, Up: o.Availability != policy.Unavailable,
			PriceMicros: o.PricePerHour.Micros, Currency: o.PricePerHour.Currency})
	}
	if err := p.History.ObservePools(ctx, at, obs); err != nil {
		return nil, err
	}
	sums, err := p.History.PoolSummaries(ctx, time.Time{})
	if err != nil {
		return nil, err
	}
	out := make(map[string]spot.PoolHistory, len(sums))
	for _, o := range offers {
		if b, ok := sums[o.Pool]; ok && o.Tier == policy.TierSpot {
			out[o.Pool] = StrategyHistory(b, p.History.HistoryTick(), tick)
		}
	}
	return out, nil
}

// StrategyHistory turns a pool's recorded history, counted in ticks of
// recorded, into the spot strategy's, counted in ticks of tick, with the
// lengths of the runs seen to end in the spells they were recorded in.
func StrategyHistory(b queue.PoolBucket, recorded, tick time.Duration) spot.PoolHistory {
	if tick <= 0 {
		tick = recorded
	}
	scale := func(n int) int { return int(math.Round(float64(n) * float64(recorded) / float64(tick))) }
	h := spot.PoolHistory{Ticks: scale(b.Ticks), UpTicks: scale(b.UpTicks), UpRuns: b.UpRuns, Run: scale(b.TailRun),
		Spell: time.Duration(max(b.SpellTicks, 1)) * recorded}
	if b.TailRun > 0 {
		h.Run = max(h.Run, 1)
	}
	h.UpSpells, h.DownSpells = b.Spells()
	return h
}

// progress estimates the compute a job has banked: for each attempt, the
// time from its start to its last heartbeat, counted only for attempts that
// were handed back or lost (their checkpoints carry the work on).
func progress(attempts []queue.Attempt) time.Duration {
	var done time.Duration
	for _, a := range attempts {
		switch a.Outcome {
		case queue.OutcomePreempted, queue.OutcomeLost, queue.OutcomeMoved, queue.OutcomeShutdown, queue.OutcomeHostError:
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
	body, err := json.Marshal(d.Compact(DecisionAlternatives, DecisionExamples))
	if err != nil {
		return queue.Placement{}, err
	}
	price, estimate := d.Chosen.Offer.PricePerHour, d.Chosen.Cost.Total
	return queue.Placement{
		Pool: d.Chosen.Offer.Pool, Region: d.Chosen.Offer.Region, Provider: d.Chosen.Offer.Provider,
		Residency: d.Residency.Class, Countries: d.Residency.Countries,
		PriceMicros: price.Micros, Currency: price.Currency, Decision: body,
		EstimateMicros: max(estimate.Micros, 0), EstimateCurrency: estimate.Currency,
	}, nil
}

// replayOf is the replay record of a decision made over offers by recipe.
func replayOf(offers *Offers, recipe Recipe) (*queue.DecisionReplay, error) {
	id, body, err := offers.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("snapshotting the offers: %w", err)
	}
	r, err := json.Marshal(recipe)
	if err != nil {
		return nil, fmt.Errorf("recording the decision's recipe: %w", err)
	}
	return &queue.DecisionReplay{SnapshotID: id, Offers: body, Recipe: r}, nil
}

// PolicyJob converts a job spec into the placement engine's requirements.
func PolicyJob(s *queue.Spec) (policy.Requirements, error) {
	j := policy.Requirements{
		Project: s.Project, Labels: s.Labels, VCPU: s.Resources.CPU,
		MemoryGB:  int(math.Ceil(s.Resources.MemoryGB)),
		Tier:      policy.Tier(s.Placement.Tier),
		Providers: s.Placement.Providers, Regions: s.Placement.Regions, Residency: s.Placement.Residency,
		ExpectedDuration: time.Duration(s.ExpectedDuration), Timeout: time.Duration(s.Timeout), AllowGPUForCPU: s.Placement.AllowGPUForCPU,
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
		if in.Job != "" {
			continue // another job's outputs: InputData
		}
		name := in.Name
		if name == "" {
			name = in.URI
		}
		j.Inputs = append(j.Inputs, policy.Input{Name: name, Provider: in.Provider, Region: in.Region, Country: in.Country, Bytes: in.Bytes})
	}
	return j, nil
}
