package policy

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Decision is a placement: the chosen offer, a ranked plan B, every
// rejected offer with its reasons, and the residency it was made under. It
// is stored as JSON with the job; Compact is its short stored form.
//
// A decision keeps each rejected offer as a failure mask and words the
// reasons only when they are asked for (Rejected, Reasons, ReasonsOf,
// MarshalJSON): most decisions are only acted upon, never read.
type Decision struct {
	// Version counts placements of the job: 1 from Place, previous+1 from
	// Replace.
	Version   int       `json:"version"`
	DecidedAt time.Time `json:"decided_at"`
	// Currency is the base currency of every cost in the decision.
	Currency string     `json:"currency"`
	Chosen   *Candidate `json:"chosen,omitempty"`
	// Alternatives are feasible offers ranked after Chosen, best first, at
	// most Rules.MaxAlternatives of them.
	Alternatives []Candidate `json:"alternatives"`
	// Feasible counts every feasible offer, kept or not.
	Feasible int `json:"feasible"`
	// Offers are the offers the decision was made among, in the order
	// given. It is the caller's slice, not a copy: it must not be modified
	// while the decision is in use.
	Offers    []Offer           `json:"offers"`
	Residency ResidencyDecision `json:"residency"`
	Notes     []string          `json:"notes,omitempty"`
	// rejections holds the rejected offers; JSON writes them as
	// "rejected" and "reasons".
	rejections *rejections
}

// Candidate is a feasible offer with its estimated cost.
type Candidate struct {
	Rank  int   `json:"rank"`
	Offer Offer `json:"offer"`
	Cost  Cost  `json:"cost"`
}

// Cost is the estimated cost of running the job on one offer, in the
// decision's currency:
//
//	compute       = price/h × expected run time
//	spot_overhead = price/h × preemption rate × run time (h) × restart overhead
//	egress        = Σ bytes of inputs outside the offer's region × the
//	                egress/GB of the provider and region the input is in
//	total         = compute + spot_overhead + egress
//
// An input's egress is billed where it is stored, so the offer's own egress
// price never enters its estimate. An unknown source price adds nothing to
// egress but sets EgressUnknown; an
// unknown spot preemption rate uses Rules.Spot.AssumedPreemptionRate and
// sets PreemptionRateAssumed.
type Cost struct {
	PricePerHour          Money         `json:"price_per_hour"`
	RunTime               time.Duration `json:"run_time"`
	ExpectedPreemptions   float64       `json:"expected_preemptions,omitempty"`
	Compute               Money         `json:"compute"`
	SpotOverhead          Money         `json:"spot_overhead"`
	Egress                Money         `json:"egress"`
	Total                 Money         `json:"total"`
	EgressUnknown         bool          `json:"egress_unknown,omitempty"`
	PreemptionRateAssumed bool          `json:"preemption_rate_assumed,omitempty"`
	Notes                 []string      `json:"notes,omitempty"`
}

// Place decides where job should run among offers under rules at time now.
// It returns a *NoPlacementError when no offer is feasible, and a plain
// error naming the field when the job or the rules are invalid.
// To place many jobs among the same offers, prepare them once with
// NewOfferSet.
func Place(job Requirements, offers []Offer, rules Rules, now time.Time) (Decision, error) {
	return NewOfferSet(offers).Place(job, rules, now)
}

// placer holds everything about one job that does not depend on the offer.
type placer struct {
	job       Requirements
	rules     *compiled
	now       time.Time
	residency ResidencyDecision
	// restricted and allowed are the effective residency.
	restricted bool
	allowed    countrySet
	ruleAllow  [][]string // per matching rule with an allow list
	ruleAllowN []string   // their names
	ruleDeny   [][]string
	ruleDenyN  []string
	// allowGPUBy says who lets a CPU-only job use GPU pools ("job" or
	// "rule <name>"); residentBy names the rules that refuse inputs stored
	// outside the residency.
	allowGPUBy string
	residentBy []string
	tier       Tier
	capBase    int64 // -1 when no cap
	budgetBase int64 // -1 when no job budget
	// projectRemaining is the smallest remaining matching project budget,
	// in base micros; projectBudget is that budget.
	projectRemaining int64
	projectBudget    *compiledBudget
	runTime          time.Duration
	// replacement state; nil for a first placement. avoid maps a pool to
	// the index of its reason in avoidWhy.
	avoid    map[string]int32
	avoidWhy []string
	escalate string

	// set holds the offers. The tables below are indexed by its ids and
	// hold the failure bits of each name, country, tier and availability,
	// found once per decision, so that checking an offer ORs a few table
	// entries instead of branching on each check: on varied offers, those
	// branches would mostly be mispredicted.
	set          *OfferSet
	providerBits []uint32
	regionBits   []uint32 // nil when the job names no regions
	cardBits     []uint32
	countryBits  [26*26 + 1]uint32 // by countryIndex+1; 0 is unknown
	tierBits     [2]uint32         // on-demand, spot
	availBits    [4]uint32         // by Availability.rank
	gpuBits      [2]uint32         // by Offer.HasGPU
	cardRanks    []int
	currencies   []currencyFacts
	// gpuPlanB is set for a CPU-only job allowed on GPU pools: they rank
	// after every CPU pool.
	gpuPlanB bool
	// inputRegions and inputProviders are the region and provider ids of
	// each job input; -1 when no offer is there, and a provider of -2 when
	// the input names none (any provider in the region). inputPrice is the
	// input's egress price in base micros per GB, -1 when unknown.
	inputRegions   []int32
	inputProviders []int32
	inputPrice     []int64
	// capLimit, budgetLimit and projectLimit are capBase, budgetBase and
	// projectRemaining, or MaxInt64 when there is none.
	capLimit, budgetLimit, projectLimit int64
	runHours                            float64 // runTime.Hours()
	// An offer already rejected for something else is priced in full only
	// when its cost may break a budget: when the job has a deadline, or
	// when costBound reaches boundLimit.
	boundOnly  bool
	boundLimit float64
	// boundPrice is a base price per hour below which no offer of the set
	// can reach boundLimit, whatever its egress price and preemption rate.
	boundPrice float64
	// spotHours is the run time in hours lost per unit of preemption rate;
	// outCost holds, per region id, at least the egress in base micros of
	// moving the inputs into it.
	spotHours float64
	outCost   []float64
	reasons   reasonTable
	// byAttr answers most reasons by the offer's attributes alone; see
	// attrLookup.
	byAttr [len(reasonCodes)]attrLookup
	keys   [len(reasonCodes)]reasonKey // reasonKeys' result
}

// currencyFacts says how to convert a currency of the set into base micros:
// rate is micros of the base currency per unit, microsPerUnit for the base
// currency itself, which mulDiv converts exactly.
type currencyFacts struct {
	known bool
	rate  int64
	// perMicro is rate in base micros per micro, for costBound.
	perMicro float64
}

func newPlacer(job Requirements, c *compiled, set *OfferSet, now time.Time) (*placer, error) {
	if err := job.Validate(); err != nil {
		return nil, err
	}
	p := &placer{
		job: job, rules: c, set: set, now: now, tier: job.tier(),
		capBase: -1, budgetBase: -1, projectRemaining: -1,
		runTime: job.ExpectedDuration,
	}
	if p.runTime == 0 {
		p.runTime = c.DefaultExpectedDuration
	}
	if job.Timeout > 0 {
		// An attempt is killed at its timeout: it never runs longer.
		p.runTime = min(p.runTime, job.Timeout)
	}
	// A very short job is charged the minimum, so that its reservation
	// against a budget is not a rounding error.
	p.runTime = max(p.runTime, c.MinChargedDuration)
	var names []string
	narrowTo := func(set countrySet, class, by string) {
		if !p.restricted {
			p.allowed, p.restricted = set, true
		} else {
			p.allowed = p.allowed.and(set)
		}
		if !slices.Contains(names, class) {
			names = append(names, class)
		}
		p.residency.ImposedBy = append(p.residency.ImposedBy, by)
	}
	narrow := func(class, by string) { narrowTo(c.classes[strings.ToUpper(class)], strings.ToUpper(class), by) }
	for _, rule := range c.Rules.Rules {
		if !rule.matches(job) {
			continue
		}
		if rule.Residency != "" {
			narrow(rule.Residency, "rule "+rule.Name)
		}
		if len(rule.AllowProviders) > 0 {
			p.ruleAllow = append(p.ruleAllow, rule.AllowProviders)
			p.ruleAllowN = append(p.ruleAllowN, rule.Name)
		}
		if len(rule.DenyProviders) > 0 {
			p.ruleDeny = append(p.ruleDeny, rule.DenyProviders)
			p.ruleDenyN = append(p.ruleDenyN, rule.Name)
		}
		if rule.AllowGPUForCPU && p.allowGPUBy == "" {
			p.allowGPUBy = "rule " + rule.Name
		}
		if rule.ResidentInputs {
			p.residentBy = append(p.residentBy, rule.Name)
		}
	}
	if job.AllowGPUForCPU {
		p.allowGPUBy = "job"
	}
	if job.Residency != "" {
		if _, ok := c.classes[strings.ToUpper(job.Residency)]; !ok {
			return nil, fmt.Errorf("job.residency: undefined residency class %q; known classes: %s", job.Residency, c.classNames())
		}
		narrow(job.Residency, "job")
	}
	for _, r := range job.DataResidency {
		narrowTo(setOf(r.Countries...), r.Class, r.By)
	}
	p.setResidencyNames(names)
	if m := job.MaxPricePerHour; m != nil {
		v, ok := c.rates.toBase(*m)
		if !ok {
			return nil, fmt.Errorf("job.max_price_per_hour: unknown currency %q (not %s and not in exchange_rates)", m.Currency, c.BaseCurrency)
		}
		p.capBase = v
	}
	if m := job.Budget; m != nil {
		v, ok := c.rates.toBase(*m)
		if !ok {
			return nil, fmt.Errorf("job.budget: unknown currency %q (not %s and not in exchange_rates)", m.Currency, c.BaseCurrency)
		}
		p.budgetBase = v
	}
	for i := range c.budgets {
		b := &c.budgets[i]
		if !matchAny([]string{b.Project}, job.Project) {
			continue
		}
		if p.projectBudget == nil || b.remaining < p.projectRemaining {
			p.projectBudget, p.projectRemaining = b, b.remaining
		}
	}
	return p, nil
}

// prepareChecks fills the failure tables from the job, the rules and the
// replacement state, checking every provider, region, card and currency of
// the set once.
func (p *placer) prepareChecks() {
	s := p.set
	p.providerBits = make([]uint32, len(s.providers.names))
	for id, name := range s.providers.names {
		p.providerBits[id] = flag(!matchAny(p.job.Providers, name), bitProvider) |
			flag(p.providerRuleReason(name) != "", bitProviderRule)
	}
	if len(p.job.Regions) > 0 {
		p.regionBits = make([]uint32, len(s.regions.names))
		for id, name := range s.regions.names {
			p.regionBits[id] = flag(!matchAny(p.job.Regions, name), bitRegion)
		}
	}
	p.cardRanks = make([]int, len(s.cards.names))
	p.cardBits = make([]uint32, len(s.cards.names))
	wants := make([][]string, len(p.job.Cards))
	for i, c := range p.job.Cards {
		wants[i] = CardTokens(c)
	}
	for id, card := range s.cards.names {
		p.cardRanks[id] = cardRank(wants, s.cardNames.names[card.name], card.memGB)
		p.cardBits[id] = flag(p.cardRanks[id] < 0, bitCard)
	}
	if p.job.GPUCount == 0 {
		p.gpuPlanB = p.allowGPUBy != ""
		p.gpuBits[1] = flag(!p.gpuPlanB, bitGPUPool)
	}
	if p.restricted {
		p.countryBits[0] = bitResidency
		for c := range 26 * 26 {
			p.countryBits[c+1] = flag(p.allowed[c/64]&(1<<(c%64)) == 0, bitResidency)
		}
	}
	p.tierBits[0] = flag(p.tier == TierSpot, bitTier)
	p.tierBits[1] = flag(p.tier == TierOnDemand, bitTier) | flag(p.escalate != "", bitEscalated)
	p.availBits[Unavailable.rank()] = bitAvailability
	p.prepareByAttr()
	for c := range p.keys {
		p.keys[c] = reasonKey{code: c}
	}
	p.runHours = p.runTime.Hours()
	p.capLimit, p.budgetLimit, p.projectLimit = math.MaxInt64, math.MaxInt64, math.MaxInt64
	if p.capBase >= 0 {
		p.capLimit = p.capBase
	}
	if p.budgetBase >= 0 {
		p.budgetLimit = p.budgetBase
	}
	if p.projectBudget != nil {
		p.projectLimit = p.projectRemaining
	}
	p.currencies = make([]currencyFacts, len(s.currencies.names))
	for id, name := range s.currencies.names {
		rate, known := p.rules.rates.lookup(name)
		if name == p.rules.BaseCurrency {
			rate, known = microsPerUnit, true
		}
		p.currencies[id] = currencyFacts{known: known, rate: rate, perMicro: float64(rate) / microsPerUnit}
	}
	p.boundOnly = p.job.Deadline.IsZero()
	// The bound is within a relative 1e-9 of exact for any amount that
	// fits in int64, far wider than float64's rounding.
	p.boundLimit = float64(min(p.budgetLimit, p.projectLimit)) * (1 - 1e-9)
	p.spotHours = p.runHours * float64(p.rules.Spot.RestartOverhead) / float64(time.Hour)
	p.prepareInputs()
	// costBound is at most price × maxHours + maxOut before its margin.
	maxHours := p.runHours + max(s.maxRate, p.rules.Spot.AssumedPreemptionRate)*p.spotHours
	var maxOut float64
	for _, c := range p.outCost {
		maxOut = max(maxOut, c)
	}
	p.boundPrice = (p.boundLimit/(1+2e-9) - maxOut) / maxHours
}

// flag is bit when cond holds and 0 otherwise; it compiles to a
// conditional move, not a branch.
func flag(cond bool, bit uint32) uint32 {
	var b uint32
	if cond {
		b = bit
	}
	return b
}

// setResidencyNames fills the decision's residency from the effective set.
func (p *placer) setResidencyNames(names []string) {
	if !p.restricted {
		return
	}
	p.residency.Countries = p.allowed.codes()
	p.residency.Class = strings.Join(names, "∩")
	for _, n := range names {
		if p.rules.classes[n] == p.allowed {
			p.residency.Class = n
			break
		}
	}
}

// estimate is the hot-path form of Cost, in base micros.
type estimate struct {
	price, compute, overhead, egress, total int64
	preemptions                             float64
	runTime                                 time.Duration
	rateAssumed, egressUnknown              bool
	egressUnknownBytes                      int64
}

// place checks every offer, ranks the feasible ones and builds the
// decision. A rejected offer is kept as its index and failure mask; its
// reasons are worded only when asked for (see rejections).
func (p *placer) place(version int) (Decision, error) {
	p.prepareChecks()
	notes, err := p.checkInputs()
	if err != nil {
		return Decision{}, err
	}
	offers := p.set.offers
	d := Decision{
		Version: version, DecidedAt: p.now, Currency: p.rules.BaseCurrency,
		Residency: p.residency, Alternatives: []Candidate{}, Offers: offers, Notes: notes,
	}
	if disjoint := p.disjoint(); disjoint != "" {
		d.Notes = append(d.Notes, disjoint)
	}
	keep := 1 + p.rules.MaxAlternatives
	top := make([]ranked, 0, keep+1)
	rejected := make([]rejectedOffer, 0, len(offers))
	for i := range offers {
		f := &p.set.facts[i]
		var est estimate
		fail := p.check(i, f, &est)
		if fail != 0 {
			rejected = append(rejected, rejectedOffer{offer: int32(i), fail: fail})
			continue
		}
		d.Feasible++
		r := ranked{index: i, offer: &offers[i], est: est, avail: int(f.avail), card: p.cardRanks[f.card],
			planB: p.gpuPlanB && f.gpu}
		if len(top) == keep && !r.less(&top[keep-1]) {
			continue
		}
		// top is short (1 + MaxAlternatives), so a linear search keeps r
		// on the stack.
		at := len(top)
		for at > 0 && r.less(&top[at-1]) {
			at--
		}
		top = slices.Insert(top, at, r)
		if len(top) > keep {
			top = top[:keep]
		}
	}
	d.rejections = &rejections{list: rejected, p: p}
	for k := range top {
		c := Candidate{Rank: k + 1, Offer: *top[k].offer, Cost: p.cost(top[k].offer, top[k].est)}
		if k == 0 {
			d.Chosen = &c
		} else {
			d.Alternatives = append(d.Alternatives, c)
		}
	}
	if d.Chosen == nil {
		return d, p.refusal(d, rejected)
	}
	if top[0].planB {
		d.Notes = append(d.Notes, "CPU-only job placed on GPU pool "+d.Chosen.Offer.Pool+" as plan B (allowed by "+p.allowGPUBy+
			"): no CPU pool is feasible")
	}
	return d, nil
}

// ranked orders feasible offers: CPU pools before GPU pools for a CPU-only
// job, then lowest total, then availability, then card preference, then
// pool, provider and region names, then input order.
type ranked struct {
	index int
	offer *Offer
	est   estimate
	avail int
	card  int
	// planB marks a GPU pool for a CPU-only job.
	planB bool
}

func (a *ranked) less(b *ranked) bool {
	if a.planB != b.planB {
		return b.planB
	}
	// cmp.Or would compare the names even when the numbers differ.
	if c := cmp.Or(
		cmp.Compare(a.est.total, b.est.total),
		cmp.Compare(a.avail, b.avail),
		cmp.Compare(a.card, b.card),
	); c != 0 {
		return c < 0
	}
	if c := cmp.Or(
		strings.Compare(a.offer.Pool, b.offer.Pool),
		strings.Compare(a.offer.Provider, b.offer.Provider),
		strings.Compare(a.offer.Region, b.offer.Region),
	); c != 0 {
		return c < 0
	}
	return a.index < b.index
}

// cardRank is the position of the first of the job's card requirements
// (as tokens) that an offer's card, named name with memGB GB (-1 when the
// name says it), meets; any card ranks 0 when the job
// accepts any, and -1 means none is met.
func cardRank(wants [][]string, name string, memGB int64) int {
	if len(wants) == 0 {
		return 0
	}
	have := offerCardTokens(name, memGB)
	for i, want := range wants {
		if len(want) > 0 && tokensWithin(want, have) {
			return i
		}
	}
	return -1
}

// codeIndex is the position of code in reasonCodes.
func codeIndex(code ReasonCode) int {
	for i, c := range reasonCodes {
		if c == code {
			return i
		}
	}
	panic("policy: unknown reason code " + code)
}

// check returns the mask of every reason offer i, with facts f, cannot
// take the job, and fills est when the offer is priced in a known
// currency. It compares numbers only and allocates nothing: the reasons are
// worded by explain.
func (p *placer) check(i int, f *offerFacts, est *estimate) uint32 {
	if f.invalid {
		return bitInvalid
	}
	j := &p.job
	var spot int
	if f.spot {
		spot = 1
	}
	var gpu int
	if f.gpu {
		gpu = 1
	}
	fail := p.countryBits[int32(f.country)+1] | p.providerBits[f.provider] | p.cardBits[f.card] |
		p.tierBits[spot] | p.availBits[f.avail] | p.gpuBits[gpu]
	if f.huge {
		o := &p.set.offers[i]
		fail |= flag(o.GPUCount < j.GPUCount, bitGPUCount) | flag(o.GPUMemoryGB < j.MinGPUMemoryGB, bitGPUMemory) |
			flag(o.VCPU < j.VCPU, bitVCPU) | flag(o.MemoryGB < j.MemoryGB, bitMemory)
	} else {
		fail |= flag(int(f.gpuCount) < j.GPUCount, bitGPUCount) | flag(int(f.gpuMemory) < j.MinGPUMemoryGB, bitGPUMemory) |
			flag(int(f.vcpu) < j.VCPU, bitVCPU) | flag(int(f.memory) < j.MemoryGB, bitMemory)
	}
	if p.regionBits != nil {
		fail |= p.regionBits[f.region]
	}
	if p.avoid != nil {
		if _, ok := p.avoid[p.set.offers[i].Pool]; ok {
			fail |= bitAvoided
		}
	}
	if fail != 0 && p.boundOnly {
		if !p.currencies[f.priceCur].known {
			return fail | bitCurrency
		}
		est.price, _ = p.toBase(f.priceCur, f.price)
		fail |= flag(est.price > p.capLimit, bitPriceCap)
		if float64(est.price) < p.boundPrice || p.costBound(f, est.price) < p.boundLimit {
			return fail
		}
	}
	if !p.estimate(f, est) {
		return fail | bitCurrency
	}
	fail |= flag(est.price > p.capLimit, bitPriceCap) | flag(est.total > p.budgetLimit, bitJobBudget) |
		flag(est.total > p.projectLimit, bitProjectBudget)
	if !j.Deadline.IsZero() && p.now.Add(est.runTime).After(j.Deadline) {
		fail |= bitDeadline
	}
	return fail
}

// Positions of the reason codes, for reason keys.
var (
	atInvalid       = codeIndex(ReasonInvalidOffer)
	atResidency     = codeIndex(ReasonResidency)
	atProviderRule  = codeIndex(ReasonProviderRule)
	atProvider      = codeIndex(ReasonProvider)
	atRegion        = codeIndex(ReasonRegion)
	atTier          = codeIndex(ReasonTier)
	atEscalated     = codeIndex(ReasonEscalated)
	atAvoided       = codeIndex(ReasonAvoided)
	atAvailability  = codeIndex(ReasonAvailability)
	atCard          = codeIndex(ReasonCard)
	atGPUPool       = codeIndex(ReasonGPUPool)
	atGPUCount      = codeIndex(ReasonGPUCount)
	atGPUMemory     = codeIndex(ReasonGPUMemory)
	atVCPU          = codeIndex(ReasonVCPU)
	atMemory        = codeIndex(ReasonMemory)
	atCurrency      = codeIndex(ReasonCurrency)
	atPriceCap      = codeIndex(ReasonPriceCap)
	atJobBudget     = codeIndex(ReasonJobBudget)
	atProjectBudget = codeIndex(ReasonProjectBudget)
	atDeadline      = codeIndex(ReasonDeadline)
)

// Failure-mask bits, one per reason code.
var (
	bitInvalid       uint32 = 1 << atInvalid
	bitResidency     uint32 = 1 << atResidency
	bitProviderRule  uint32 = 1 << atProviderRule
	bitProvider      uint32 = 1 << atProvider
	bitRegion        uint32 = 1 << atRegion
	bitTier          uint32 = 1 << atTier
	bitEscalated     uint32 = 1 << atEscalated
	bitAvoided       uint32 = 1 << atAvoided
	bitAvailability  uint32 = 1 << atAvailability
	bitCard          uint32 = 1 << atCard
	bitGPUPool       uint32 = 1 << atGPUPool
	bitGPUCount      uint32 = 1 << atGPUCount
	bitGPUMemory     uint32 = 1 << atGPUMemory
	bitVCPU          uint32 = 1 << atVCPU
	bitMemory        uint32 = 1 << atMemory
	bitCurrency      uint32 = 1 << atCurrency
	bitPriceCap      uint32 = 1 << atPriceCap
	bitJobBudget     uint32 = 1 << atJobBudget
	bitProjectBudget uint32 = 1 << atProjectBudget
	bitDeadline      uint32 = 1 << atDeadline
)

// attrSlot is a reason found by attributes: b is the attribute at
// attrLookup.b, i the reason's index+1, or 0 while none is known.
type attrSlot struct {
	b, i int32
}

// attrLookup finds the reasons of one code whose message depends on the
// offer's attributes at positions a and b only: slots[attrs[a]] holds the
// reason's index once some offer with those attributes was explained.
// slots is nil for the other codes.
type attrLookup struct {
	a, b  uint8
	slots []attrSlot
}

// countSlots is how many distinct GPU, vCPU and memory counts byAttr
// holds; larger counts take the general path.
const countSlots = 256

// prepareByAttr sizes byAttr for the set's ids. Each code's attributes
// are those reasonKeys puts in its key; a code with one attribute checks it
// as b too, and a code with none uses the tier, whose two slots then hold
// the same reason.
func (p *placer) prepareByAttr() {
	s := p.set
	lookups := [...]struct{ code, a, b, n int }{
		{atResidency, attrRegion, attrCountry, len(s.regions.names)},
		{atProviderRule, attrProvider, attrProvider, len(s.providers.names)},
		{atProvider, attrProvider, attrProvider, len(s.providers.names)},
		{atRegion, attrRegion, attrRegion, len(s.regions.names)},
		{atTier, attrSpot, attrSpot, 2},
		{atEscalated, attrSpot, attrSpot, 2},
		{atAvailability, attrSpot, attrSpot, 2},
		{atCard, attrCard, attrCard, len(s.cards.names)},
		{atGPUPool, attrSpot, attrSpot, 2},
		{atGPUCount, attrGPUCount, attrGPUCount, countSlots},
		{atGPUMemory, attrCard, attrGPUMemory, len(s.cards.names)},
		{atVCPU, attrVCPU, attrVCPU, countSlots},
		{atMemory, attrMemory, attrMemory, countSlots},
		{atCurrency, attrSpot, attrSpot, 2},
	}
	total := 0
	for _, l := range lookups {
		total += l.n
	}
	slots := make([]attrSlot, total)
	for _, l := range lookups {
		p.byAttr[l.code] = attrLookup{a: uint8(l.a), b: uint8(l.b), slots: slots[:l.n:l.n]}
		slots = slots[l.n:]
	}
}

// explain appends to why the index of one reason per bit of fail, in the
// order the checks run. Most are found in byAttr by the offer's
// attributes; the others through their reason keys.
func (p *placer) explain(i int, f *offerFacts, fail uint32, est *estimate, why []int32) []int32 {
	if f.huge {
		return p.explainByKey(i, f, fail, est, why)
	}
	for rest := fail; rest != 0; rest &= rest - 1 {
		c := bits.TrailingZeros32(rest)
		l := &p.byAttr[c]
		a, b := f.attr(l.a), f.attr(l.b)
		slots := l.slots
		if uint(a) < uint(len(slots)) {
			if s := &slots[a]; s.i > 0 && s.b == b {
				why = append(why, s.i-1)
				continue
			}
		}
		why = p.explainByKey(i, f, 1<<c, est, why)
		if uint(a) < uint(len(slots)) {
			slots[a] = attrSlot{b: b, i: why[len(why)-1] + 1}
		}
	}
	return why
}

// explainByKey appends to why the index of one reason per bit of fail, in the
// order the checks run, wording a reason only the first time its key is
// seen.
func (p *placer) explainByKey(i int, f *offerFacts, fail uint32, est *estimate, why []int32) []int32 {
	keys := p.reasonKeys(i, f, fail, est)
	t := &p.reasons
	for rest := fail; rest != 0; rest &= rest - 1 {
		k := keys[bits.TrailingZeros32(rest)]
		r := t.find(k)
		if r < 0 {
			r = t.index(k, func() string { return p.word(k.code, &p.set.offers[i], est) })
		}
		why = append(why, r)
	}
	return why
}

// reasonKeys gives, for every reason code, the key that holds exactly the
// attributes of offer i its message names, so equal keys mean equal
// messages. They are filled all at once rather than per reason: a switch
// on the code would jump somewhere different for almost every reason.
func (p *placer) reasonKeys(i int, f *offerFacts, fail uint32, est *estimate) *[len(reasonCodes)]reasonKey {
	k := &p.keys // codes set by prepareChecks; codes without attributes keep a and b 0
	provider, region, card := int64(f.provider), int64(f.region), int64(f.card)
	// Each invalid offer is worded on its own.
	k[atInvalid].a = -1 - int64(i)
	k[atResidency].a, k[atResidency].b = region, int64(int32(f.country))
	k[atProviderRule].a, k[atProvider].a, k[atRegion].a = provider, provider, region
	k[atTier].a = int64(flag(f.spot, 1))
	if fail&bitAvoided != 0 {
		k[atAvoided].a = int64(p.avoid[p.set.offers[i].Pool])
	}
	k[atCard].a, k[atGPUMemory].a, k[atGPUMemory].b = card, card, int64(f.gpuMemory)
	k[atGPUCount].a, k[atVCPU].a, k[atMemory].a = int64(f.gpuCount), int64(f.vcpu), int64(f.memory)
	if f.huge {
		o := &p.set.offers[i]
		k[atGPUMemory].b = int64(o.GPUMemoryGB)
		k[atGPUCount].a, k[atVCPU].a, k[atMemory].a = int64(o.GPUCount), int64(o.VCPU), int64(o.MemoryGB)
	}
	k[atPriceCap].a, k[atPriceCap].b = f.price, int64(f.priceCur)
	k[atJobBudget].a, k[atProjectBudget].a, k[atDeadline].a = est.total, est.total, int64(est.runTime)
	return k
}

// word is the message of reason code for offer o with estimate est.
func (p *placer) word(code int, o *Offer, est *estimate) string {
	j := &p.job
	money := p.rules.rates.money
	switch code {
	case atInvalid:
		return "invalid offer: " + o.validate().Error()
	case atResidency:
		msg := "region " + o.Region + " (" + cmp.Or(o.Country, "country unknown") + ") outside residency " +
			p.residency.Class + " required by " + strings.Join(p.residency.ImposedBy, " and ")
		if d := p.disjointClasses(); d != "" {
			msg += " (" + d + ")"
		}
		return msg
	case atProviderRule:
		return p.providerRuleReason(o.Provider)
	case atProvider:
		return "provider " + o.Provider + " not in the job's providers (" + strings.Join(j.Providers, ", ") + ")"
	case atRegion:
		return "region " + o.Region + " not in the job's regions (" + strings.Join(j.Regions, ", ") + ")"
	case atTier:
		return "tier " + string(o.Tier) + ", job accepts " + string(p.tier)
	case atEscalated:
		return p.escalate
	case atAvoided:
		return p.avoidWhy[p.avoid[o.Pool]]
	case atAvailability:
		return "no capacity (availability none)"
	case atCard:
		card := o.Card
		if o.GPUMemoryGB > 0 && !cardNamesMemory(o.Card) {
			card += " (" + strconv.Itoa(o.GPUMemoryGB) + " GB)"
		}
		return "card " + card + " not accepted (" + strings.Join(j.Cards, ", ") + ")"
	case atGPUPool:
		return "GPU pool kept for GPU jobs; a CPU-only job may use it as plan B with placement.allow_gpu_for_cpu"
	case atGPUCount:
		return strconv.Itoa(o.GPUCount) + " GPUs, job needs " + strconv.Itoa(j.GPUCount)
	case atGPUMemory:
		return "card " + o.Card + " has " + strconv.Itoa(o.GPUMemoryGB) + " GB, job needs " + strconv.Itoa(j.MinGPUMemoryGB) + " GB"
	case atVCPU:
		return strconv.Itoa(o.VCPU) + " vCPU, job needs " + strconv.Itoa(j.VCPU)
	case atMemory:
		return strconv.Itoa(o.MemoryGB) + " GB memory, job needs " + strconv.Itoa(j.MemoryGB) + " GB"
	case atCurrency:
		return "price in a currency with no exchange rate to " + p.rules.BaseCurrency
	case atPriceCap:
		s := "price " + o.PricePerHour.String() + "/h"
		if o.PricePerHour.Currency != p.rules.BaseCurrency {
			s += " (" + money(est.price).String() + ")"
		}
		return s + " over cap " + j.MaxPricePerHour.String() + "/h"
	case atJobBudget:
		return "estimated cost " + money(est.total).String() + " over the job budget " + j.Budget.String()
	case atProjectBudget:
		b := p.projectBudget
		return "estimated cost " + money(est.total).String() + " over the " + money(max(p.projectRemaining, 0)).String() +
			" left of budget " + b.Project + " (" + b.Period + " cap " + b.Cap.String() + ")"
	case atDeadline:
		return "expected run time " + est.runTime.Round(time.Minute).String() + " ends after the deadline " +
			j.Deadline.UTC().Format(time.RFC3339)
	}
	return string(reasonCodes[code])
}

// providerRuleReason says which matching rule excludes provider, or "".
func (p *placer) providerRuleReason(provider string) string {
	for i, deny := range p.ruleDeny {
		if matchAny(deny, provider) {
			return "provider " + provider + " denied by rule " + p.ruleDenyN[i]
		}
	}
	for i, allow := range p.ruleAllow {
		if !matchAny(allow, provider) {
			return "provider " + provider + " not allowed by rule " + p.ruleAllowN[i] + " (" + strings.Join(allow, ", ") + ")"
		}
	}
	return ""
}

const bytesPerGB = 1_000_000_000

// estimate prices the job on an offer with facts f in base micros; it is
// false when the price is in a currency without an exchange rate.
func (p *placer) estimate(f *offerFacts, e *estimate) bool {
	*e = estimate{runTime: p.runTime}
	var ok bool
	if e.price, ok = p.toBase(f.priceCur, f.price); !ok {
		return false
	}
	hour := int64(time.Hour)
	e.compute = mulDiv(e.price, int64(p.runTime), hour)
	if f.spot {
		rate := p.rules.Spot.AssumedPreemptionRate
		if f.rateKnown {
			rate = f.rate
		} else {
			e.rateAssumed = true
		}
		e.preemptions = rate * p.runHours
		lost := e.preemptions * float64(p.rules.Spot.RestartOverhead)
		if lost > math.MaxInt64/2 {
			lost = math.MaxInt64 / 2
		}
		e.runTime += time.Duration(lost)
		e.overhead = mulDiv(e.price, int64(lost), hour)
	}
	for k, in := range p.job.Inputs {
		if in.Bytes == 0 || p.local(k, f) {
			continue
		}
		price := p.inputPrice[k]
		if price < 0 {
			e.egressUnknown = true
			e.egressUnknownBytes = addSat(e.egressUnknownBytes, in.Bytes)
			continue
		}
		e.egress = addSat(e.egress, mulDiv(in.Bytes, price, bytesPerGB))
	}
	e.total = addSat(addSat(e.compute, e.overhead), e.egress)
	return true
}

// costBound is at least the total estimate would find for an offer with
// facts f and base price per hour price, in a known currency: the same
// model in float64 without rounding down, with every input that may move
// charged at its source's egress price, and a 1e-9 margin over float64's
// rounding. It is NaN or +Inf where the model overflows.
func (p *placer) costBound(f *offerFacts, price int64) float64 {
	hours := p.runHours
	if f.spot {
		rate := p.rules.Spot.AssumedPreemptionRate
		if f.rateKnown {
			rate = f.rate
		}
		hours += rate * p.spotHours
	}
	return (float64(price)*hours + p.outCost[f.region]) * (1 + 1e-9)
}

// toBase converts non-negative micros of the set's currency cur into base
// micros, as rates.toBase does.
func (p *placer) toBase(cur int16, micros int64) (int64, bool) {
	c := &p.currencies[cur]
	if !c.known {
		return 0, false
	}
	return mulDiv(micros, c.rate, microsPerUnit), true
}

// cost expands an estimate into the decision's breakdown.
func (p *placer) cost(o *Offer, e estimate) Cost {
	r := &p.rules.rates
	c := Cost{
		PricePerHour: r.money(e.price), RunTime: e.runTime, ExpectedPreemptions: e.preemptions,
		Compute: r.money(e.compute), SpotOverhead: r.money(e.overhead), Egress: r.money(e.egress),
		Total: r.money(e.total), EgressUnknown: e.egressUnknown, PreemptionRateAssumed: e.rateAssumed,
	}
	if e.egressUnknown {
		c.Notes = append(c.Notes, fmt.Sprintf("egress price unknown where %s of inputs moved into %s is stored: not included in the total (the policy's egress_prices can give it)",
			formatBytes(e.egressUnknownBytes), o.Region))
	}
	if e.rateAssumed {
		c.Notes = append(c.Notes, fmt.Sprintf("spot preemption rate unknown: assumed %g/h", p.rules.Spot.AssumedPreemptionRate))
	}
	return c
}

func formatBytes(n int64) string {
	return strconv.FormatFloat(float64(n)/bytesPerGB, 'f', -1, 64) + " GB"
}
