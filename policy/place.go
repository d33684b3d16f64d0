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
// is stored as JSON with the job.
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
	Feasible  int               `json:"feasible"`
	Rejected  []Rejection       `json:"rejected"`
	Residency ResidencyDecision `json:"residency"`
	Notes     []string          `json:"notes,omitempty"`
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
//	egress        = Σ bytes of inputs outside the offer's region × egress/GB
//	total         = compute + spot_overhead + egress
//
// An unknown egress price adds nothing to egress but sets EgressUnknown; an
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
func Place(job Job, offers []Offer, rules Rules, now time.Time) (Decision, error) {
	c, err := compile(rules)
	if err != nil {
		return Decision{}, err
	}
	p, err := newPlacer(job, c, now)
	if err != nil {
		return Decision{}, err
	}
	return p.place(offers, 1)
}

// placer holds everything about one job that does not depend on the offer.
type placer struct {
	job       Job
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
	tier       Tier
	capBase    int64 // -1 when no cap
	budgetBase int64 // -1 when no job budget
	// projectRemaining is the smallest remaining matching project budget,
	// in base micros; projectBudget is that budget.
	projectRemaining int64
	projectBudget    *compiledBudget
	runTime          time.Duration
	// replacement state; nil for a first placement.
	avoid    map[string]string
	escalate string

	providerMemo map[string]uint8
	regionMemo   map[string]bool
	// memo holds one map of worded reasons per reason code.
	memo [len(reasonCodes)]reasonMemo
}

// reasonMemo caches worded reasons by one attribute, s or n; an entry is
// used only when the other attribute matches too.
type reasonMemo struct {
	byS map[string]memoEntry
	byN map[int64]memoEntry
}

type memoEntry struct {
	s   string
	n   int64
	msg string
}

func newPlacer(job Job, c *compiled, now time.Time) (*placer, error) {
	if err := job.Validate(); err != nil {
		return nil, err
	}
	p := &placer{
		job: job, rules: c, now: now, tier: job.tier(),
		capBase: -1, budgetBase: -1, projectRemaining: -1,
		runTime:      job.ExpectedDuration,
		providerMemo: map[string]uint8{},
		regionMemo:   map[string]bool{},
	}
	if p.runTime == 0 {
		p.runTime = c.DefaultExpectedDuration
	}
	var names []string
	narrow := func(class, by string) {
		set := c.classes[strings.ToUpper(class)]
		if !p.restricted {
			p.allowed, p.restricted = set, true
		} else {
			p.allowed = p.allowed.and(set)
		}
		if !slices.Contains(names, strings.ToUpper(class)) {
			names = append(names, strings.ToUpper(class))
		}
		p.residency.ImposedBy = append(p.residency.ImposedBy, by)
	}
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
	}
	if job.Residency != "" {
		if _, ok := c.classes[strings.ToUpper(job.Residency)]; !ok {
			return nil, fmt.Errorf("job.residency: undefined residency class %q", job.Residency)
		}
		narrow(job.Residency, "job")
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

// place checks every offer, ranks the feasible ones and builds the decision.
func (p *placer) place(offers []Offer, version int) (Decision, error) {
	d := Decision{
		Version: version, DecidedAt: p.now, Currency: p.rules.BaseCurrency,
		Residency: p.residency, Alternatives: []Candidate{},
	}
	keep := 1 + p.rules.MaxAlternatives
	top := make([]ranked, 0, keep+1)
	type rejectedAt struct {
		offer int32
		fail  uint32
	}
	rejected := make([]rejectedAt, 0, len(offers))
	nReasons := 0
	for i := range offers {
		o := &offers[i]
		fail, est := p.check(o)
		if fail != 0 {
			rejected = append(rejected, rejectedAt{int32(i), fail})
			nReasons += bits.OnesCount32(fail)
			continue
		}
		d.Feasible++
		r := ranked{index: i, offer: o, est: est, avail: o.Availability.rank(), card: p.cardRank(o.Card)}
		if len(top) == keep && !r.less(&top[keep-1]) {
			continue
		}
		at, _ := slices.BinarySearchFunc(top, &r, func(a ranked, b *ranked) int {
			if a.less(b) {
				return -1
			}
			return 1
		})
		top = slices.Insert(top, at, r)
		if len(top) > keep {
			top = top[:keep]
		}
	}
	reasons := make([]Reason, 0, nReasons)
	d.Rejected = make([]Rejection, len(rejected))
	for k, r := range rejected {
		from := len(reasons)
		reasons = p.explain(&offers[r.offer], r.fail, reasons)
		d.Rejected[k] = Rejection{Offer: offers[r.offer], Reasons: reasons[from:len(reasons):len(reasons)]}
	}
	for k := range top {
		c := Candidate{Rank: k + 1, Offer: *top[k].offer, Cost: p.cost(top[k].offer, top[k].est)}
		if k == 0 {
			d.Chosen = &c
		} else {
			d.Alternatives = append(d.Alternatives, c)
		}
	}
	if d.Chosen == nil {
		return d, p.refusal(d)
	}
	return d, nil
}

// ranked orders feasible offers: lowest total, then availability, then card
// preference, then pool, provider and region names, then input order.
type ranked struct {
	index int
	offer *Offer
	est   estimate
	avail int
	card  int
}

func (a *ranked) less(b *ranked) bool {
	if c := cmp.Or(
		cmp.Compare(a.est.total, b.est.total),
		cmp.Compare(a.avail, b.avail),
		cmp.Compare(a.card, b.card),
		strings.Compare(a.offer.Pool, b.offer.Pool),
		strings.Compare(a.offer.Provider, b.offer.Provider),
		strings.Compare(a.offer.Region, b.offer.Region),
	); c != 0 {
		return c < 0
	}
	return a.index < b.index
}

// cardRank is the card's position in the job's preference; any card ranks 0
// when the job accepts any.
func (p *placer) cardRank(card string) int {
	if len(p.job.Cards) == 0 {
		return 0
	}
	for i, c := range p.job.Cards {
		if c == card {
			return i
		}
	}
	return -1
}

const (
	providerJobOK = 1 << iota
	providerRulesOK
	providerKnown
)

// codeIndex is the position of code in reasonCodes.
func codeIndex(code ReasonCode) int {
	for i, c := range reasonCodes {
		if c == code {
			return i
		}
	}
	panic("policy: unknown reason code " + code)
}

// bit is the failure-mask bit of a reason code.
func bit(code ReasonCode) uint32 { return 1 << codeIndex(code) }

var (
	bitInvalid       = bit(ReasonInvalidOffer)
	bitResidency     = bit(ReasonResidency)
	bitProviderRule  = bit(ReasonProviderRule)
	bitProvider      = bit(ReasonProvider)
	bitRegion        = bit(ReasonRegion)
	bitTier          = bit(ReasonTier)
	bitEscalated     = bit(ReasonEscalated)
	bitAvoided       = bit(ReasonAvoided)
	bitAvailability  = bit(ReasonAvailability)
	bitCard          = bit(ReasonCard)
	bitGPUCount      = bit(ReasonGPUCount)
	bitGPUMemory     = bit(ReasonGPUMemory)
	bitVCPU          = bit(ReasonVCPU)
	bitMemory        = bit(ReasonMemory)
	bitCurrency      = bit(ReasonCurrency)
	bitPriceCap      = bit(ReasonPriceCap)
	bitJobBudget     = bit(ReasonJobBudget)
	bitProjectBudget = bit(ReasonProjectBudget)
	bitDeadline      = bit(ReasonDeadline)
)

// check returns the mask of every reason offer o cannot take the job, and
// the cost estimate when o is priced in a known currency. It allocates
// nothing: the reasons are worded afterwards, by explain.
func (p *placer) check(o *Offer) (uint32, estimate) {
	var est estimate
	if o.Validate() != nil {
		return bitInvalid, est
	}
	j := &p.job
	var fail uint32
	if p.restricted && !p.allowed.has(o.Country) {
		fail |= bitResidency
	}
	pv := p.providerMemo[o.Provider]
	if pv&providerKnown == 0 {
		pv = providerKnown
		if matchAny(j.Providers, o.Provider) {
			pv |= providerJobOK
		}
		if p.providerRuleReason(o.Provider) == "" {
			pv |= providerRulesOK
		}
		p.providerMemo[o.Provider] = pv
	}
	if pv&providerRulesOK == 0 {
		fail |= bitProviderRule
	}
	if pv&providerJobOK == 0 {
		fail |= bitProvider
	}
	if len(j.Regions) > 0 {
		ok, seen := p.regionMemo[o.Region]
		if !seen {
			ok = matchAny(j.Regions, o.Region)
			p.regionMemo[o.Region] = ok
		}
		if !ok {
			fail |= bitRegion
		}
	}
	if p.tier != TierSpotThenOnDemand && o.Tier != p.tier {
		fail |= bitTier
	}
	if p.escalate != "" && o.Tier == TierSpot {
		fail |= bitEscalated
	}
	if p.avoid != nil {
		if _, ok := p.avoid[o.Pool]; ok {
			fail |= bitAvoided
		}
	}
	if o.Availability == Unavailable {
		fail |= bitAvailability
	}
	if p.cardRank(o.Card) < 0 {
		fail |= bitCard
	}
	if o.GPUCount < j.GPUCount {
		fail |= bitGPUCount
	}
	if o.GPUMemoryGB < j.MinGPUMemoryGB {
		fail |= bitGPUMemory
	}
	if o.VCPU < j.VCPU {
		fail |= bitVCPU
	}
	if o.MemoryGB < j.MemoryGB {
		fail |= bitMemory
	}
	est, ok := p.estimate(o)
	if !ok {
		return fail | bitCurrency, est
	}
	if p.capBase >= 0 && est.price > p.capBase {
		fail |= bitPriceCap
	}
	if p.budgetBase >= 0 && est.total > p.budgetBase {
		fail |= bitJobBudget
	}
	if p.projectBudget != nil && est.total > p.projectRemaining {
		fail |= bitProjectBudget
	}
	if !j.Deadline.IsZero() && p.now.Add(est.runTime).After(j.Deadline) {
		fail |= bitDeadline
	}
	return fail, est
}

// explain appends one worded reason per bit of fail.
func (p *placer) explain(o *Offer, fail uint32, reasons []Reason) []Reason {
	j := &p.job
	var est estimate
	if fail&(bitPriceCap|bitJobBudget|bitProjectBudget|bitDeadline) != 0 {
		est, _ = p.estimate(o)
	}
	add := func(b uint32, byN bool, s string, n int64, build func() string) {
		i := bits.TrailingZeros32(b)
		reasons = append(reasons, Reason{reasonCodes[i], p.msg(i, byN, s, n, build)})
	}
	if fail&bitInvalid != 0 {
		return append(reasons, Reason{ReasonInvalidOffer, "invalid offer: " + o.Validate().Error()})
	}
	if fail&bitResidency != 0 {
		country, _ := countryIndex(o.Country)
		add(bitResidency, false, o.Region, int64(country), func() string {
			return "region " + o.Region + " (" + cmp.Or(o.Country, "country unknown") + ") outside residency " +
				p.residency.Class + " required by " + strings.Join(p.residency.ImposedBy, " and ")
		})
	}
	if fail&bitProviderRule != 0 {
		add(bitProviderRule, false, o.Provider, 0, func() string { return p.providerRuleReason(o.Provider) })
	}
	if fail&bitProvider != 0 {
		add(bitProvider, false, o.Provider, 0, func() string {
			return "provider " + o.Provider + " not in the job's providers (" + strings.Join(j.Providers, ", ") + ")"
		})
	}
	if fail&bitRegion != 0 {
		add(bitRegion, false, o.Region, 0, func() string {
			return "region " + o.Region + " not in the job's regions (" + strings.Join(j.Regions, ", ") + ")"
		})
	}
	if fail&bitTier != 0 {
		add(bitTier, false, string(o.Tier), 0, func() string {
			return "tier " + string(o.Tier) + ", job accepts " + string(p.tier)
		})
	}
	if fail&bitEscalated != 0 {
		reasons = append(reasons, Reason{ReasonEscalated, p.escalate})
	}
	if fail&bitAvoided != 0 {
		reasons = append(reasons, Reason{ReasonAvoided, p.avoid[o.Pool]})
	}
	if fail&bitAvailability != 0 {
		reasons = append(reasons, Reason{ReasonAvailability, "no capacity (availability none)"})
	}
	if fail&bitCard != 0 {
		add(bitCard, false, o.Card, 0, func() string {
			return "card " + o.Card + " not accepted (" + strings.Join(j.Cards, ", ") + ")"
		})
	}
	if fail&bitGPUCount != 0 {
		add(bitGPUCount, true, "", int64(o.GPUCount), func() string {
			return strconv.Itoa(o.GPUCount) + " GPUs, job needs " + strconv.Itoa(j.GPUCount)
		})
	}
	if fail&bitGPUMemory != 0 {
		add(bitGPUMemory, false, o.Card, int64(o.GPUMemoryGB), func() string {
			return "card " + o.Card + " has " + strconv.Itoa(o.GPUMemoryGB) + " GB, job needs " + strconv.Itoa(j.MinGPUMemoryGB) + " GB"
		})
	}
	if fail&bitVCPU != 0 {
		add(bitVCPU, true, "", int64(o.VCPU), func() string {
			return strconv.Itoa(o.VCPU) + " vCPU, job needs " + strconv.Itoa(j.VCPU)
		})
	}
	if fail&bitMemory != 0 {
		add(bitMemory, true, "", int64(o.MemoryGB), func() string {
			return strconv.Itoa(o.MemoryGB) + " GB memory, job needs " + strconv.Itoa(j.MemoryGB) + " GB"
		})
	}
	if fail&bitCurrency != 0 {
		add(bitCurrency, false, o.PricePerHour.Currency, 0, func() string {
			return "price or egress in a currency with no exchange rate to " + p.rules.BaseCurrency
		})
	}
	if fail&bitPriceCap != 0 {
		add(bitPriceCap, true, o.PricePerHour.Currency, priceKey(o.PricePerHour), func() string {
			s := "price " + o.PricePerHour.String() + "/h"
			if o.PricePerHour.Currency != p.rules.BaseCurrency {
				s += " (" + p.rules.rates.money(est.price).String() + ")"
			}
			return s + " over cap " + j.MaxPricePerHour.String() + "/h"
		})
	}
	if fail&bitJobBudget != 0 {
		add(bitJobBudget, true, "", est.total, func() string {
			return "estimated cost " + p.rules.rates.money(est.total).String() + " over the job budget " + j.Budget.String()
		})
	}
	if fail&bitProjectBudget != 0 {
		add(bitProjectBudget, true, "", est.total, func() string {
			b := p.projectBudget
			return "estimated cost " + p.rules.rates.money(est.total).String() + " over the " +
				p.rules.rates.money(max(p.projectRemaining, 0)).String() + " left of budget " + b.Project +
				" (" + b.Period + " cap " + b.Cap.String() + ")"
		})
	}
	if fail&bitDeadline != 0 {
		add(bitDeadline, true, "", int64(est.runTime), func() string {
			return "expected run time " + est.runTime.Round(time.Minute).String() + " ends after the deadline " +
				j.Deadline.UTC().Format(time.RFC3339)
		})
	}
	return reasons
}

// msg memoises a reason's wording: offers share regions, cards and prices,
// so most messages are built once per decision.
func (p *placer) msg(code int, byN bool, s string, n int64, build func() string) string {
	m := &p.memo[code]
	var e memoEntry
	var ok bool
	if byN {
		e, ok = m.byN[n]
	} else {
		e, ok = m.byS[s]
	}
	if ok && e.s == s && e.n == n {
		return e.msg
	}
	e = memoEntry{s, n, build()}
	if byN {
		if m.byN == nil {
			m.byN = map[int64]memoEntry{}
		}
		m.byN[n] = e
	} else {
		if m.byS == nil {
			m.byS = map[string]memoEntry{}
		}
		m.byS[s] = e
	}
	return e.msg
}

// priceKey packs an amount and its currency into one memo key; amounts
// too large to pack share key -1 and are told apart by the entry check.
func priceKey(m Money) int64 {
	if m.Micros < 0 || m.Micros >= 1<<40 || !validCurrency(m.Currency) {
		return -1
	}
	c := int64(m.Currency[0]-'A')*26*26 + int64(m.Currency[1]-'A')*26 + int64(m.Currency[2]-'A')
	return m.Micros*26*26*26 + c
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

// estimate prices the job on o in base micros; ok is false when a price is
// in a currency without an exchange rate.
func (p *placer) estimate(o *Offer) (estimate, bool) {
	e := estimate{runTime: p.runTime}
	var ok bool
	if e.price, ok = p.rules.rates.toBase(o.PricePerHour); !ok {
		return e, false
	}
	hour := int64(time.Hour)
	e.compute = mulDiv(e.price, int64(p.runTime), hour)
	if o.Tier == TierSpot {
		rate := p.rules.Spot.AssumedPreemptionRate
		if o.PreemptionRate != nil {
			rate = *o.PreemptionRate
		} else {
			e.rateAssumed = true
		}
		e.preemptions = rate * p.runTime.Hours()
		lost := e.preemptions * float64(p.rules.Spot.RestartOverhead)
		if lost > math.MaxInt64/2 {
			lost = math.MaxInt64 / 2
		}
		e.runTime += time.Duration(lost)
		e.overhead = mulDiv(e.price, int64(lost), hour)
	}
	var egressPrice int64
	if o.EgressPerGB != nil {
		if egressPrice, ok = p.rules.rates.toBase(*o.EgressPerGB); !ok {
			return e, false
		}
	}
	for _, in := range p.job.Inputs {
		if in.Region == o.Region || in.Bytes == 0 {
			continue
		}
		if o.EgressPerGB == nil {
			e.egressUnknown = true
			e.egressUnknownBytes = addSat(e.egressUnknownBytes, in.Bytes)
			continue
		}
		e.egress = addSat(e.egress, mulDiv(in.Bytes, egressPrice, bytesPerGB))
	}
	e.total = addSat(addSat(e.compute, e.overhead), e.egress)
	return e, true
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
		c.Notes = append(c.Notes, fmt.Sprintf("egress price unknown for %s leaving other regions into %s: not included in the total",
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
