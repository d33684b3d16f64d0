package policy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"path"
	"slices"
	"testing"
	"time"

	"github.com/gpuq/gpuq/policy"
	"pgregory.net/rapid"
)

var (
	propCountries = []string{"DE", "FR", "IE", "SE", "NO", "IS", "CH", "GB", "US", "JP", ""}
	propCards     = []string{"H100", "A100-80GB", "A100-40GB", "L4", "cpu"}
	propClasses   = []string{"EU", "EEA", "CH", "UK", "NORDICS"}
	propProjects  = []string{"vision", "vision-eu", "nlp", "med-imaging"}
	usdRate       = 0.9
)

func genMoney(t *rapid.T, label string, maxMicros int64) policy.Money {
	return policy.Money{
		Micros:   rapid.Int64Range(0, maxMicros).Draw(t, label),
		Currency: rapid.SampledFrom([]string{"EUR", "USD"}).Draw(t, label+"_currency"),
	}
}

func genOffers(t *rapid.T) []policy.Offer {
	n := rapid.IntRange(0, 30).Draw(t, "offers")
	offers := make([]policy.Offer, n)
	for i := range offers {
		o := policy.Offer{
			Provider:     rapid.SampledFrom([]string{"aws", "hetzner", "scaleway", "cheapgpu"}).Draw(t, "provider"),
			Pool:         fmt.Sprintf("o%d", i),
			Region:       rapid.SampledFrom([]string{"r1", "r2", "r3"}).Draw(t, "region"),
			Country:      rapid.SampledFrom(propCountries).Draw(t, "country"),
			Card:         rapid.SampledFrom(propCards).Draw(t, "card"),
			GPUCount:     rapid.IntRange(0, 8).Draw(t, "gpus"),
			GPUMemoryGB:  rapid.SampledFrom([]int{0, 24, 40, 80}).Draw(t, "gpu_mem"),
			VCPU:         rapid.IntRange(1, 64).Draw(t, "vcpu"),
			MemoryGB:     rapid.IntRange(1, 512).Draw(t, "mem"),
			Tier:         rapid.SampledFrom([]policy.Tier{policy.TierSpot, policy.TierOnDemand}).Draw(t, "tier"),
			PricePerHour: genMoney(t, "price", 5_000_000),
			Availability: rapid.SampledFrom([]policy.Availability{policy.Available, policy.Scarce, policy.AvailabilityUnknown, policy.Unavailable}).Draw(t, "avail"),
		}
		if rapid.Bool().Draw(t, "has_egress") {
			o.EgressPerGB = ptr(genMoney(t, "egress", 100_000))
		}
		if rapid.Bool().Draw(t, "has_rate") {
			o.PreemptionRate = ptr(rapid.Float64Range(0, 1).Draw(t, "rate"))
		}
		offers[i] = o
	}
	return offers
}

func genRules(t *rapid.T) policy.Rules {
	r := policy.Rules{
		ExchangeRates:    map[string]float64{"USD": usdRate},
		ResidencyClasses: map[string][]string{"NORDICS": {"SE", "NO", "IS", "DK", "FI"}},
		MaxAlternatives:  1000,
	}
	for i := range rapid.IntRange(0, 4).Draw(t, "rules") {
		rule := policy.Rule{Name: fmt.Sprintf("r%d", i)}
		if rapid.Bool().Draw(t, "by_project") {
			rule.Project = rapid.SampledFrom([]string{"vision*", "nlp", "*", "med-*"}).Draw(t, "project_glob")
		} else {
			rule.Labels = map[string]string{"data": rapid.SampledFrom([]string{"personal", "public"}).Draw(t, "label")}
		}
		if rapid.Bool().Draw(t, "has_residency") {
			rule.Residency = rapid.SampledFrom(propClasses).Draw(t, "rule_class")
		}
		if rapid.Bool().Draw(t, "denies") {
			rule.DenyProviders = []string{"cheap*"}
		}
		r.Rules = append(r.Rules, rule)
	}
	if rapid.Bool().Draw(t, "has_egress_prices") {
		r.EgressPrices = []policy.EgressPrice{{Region: "r1", PerGB: genMoney(t, "source_egress", 100_000)}}
	}
	if rapid.Bool().Draw(t, "has_budget") {
		r.Budgets = []policy.Budget{{
			Project: rapid.SampledFrom(propProjects).Draw(t, "budget_project"), Period: "month",
			Cap: genMoney(t, "cap", 200_000_000), Spent: policy.Money{Micros: rapid.Int64Range(0, 100_000_000).Draw(t, "spent"), Currency: "EUR"},
		}}
	}
	return r
}

func genJob(t *rapid.T) policy.Requirements {
	j := policy.Requirements{
		Project:          rapid.SampledFrom(propProjects).Draw(t, "project"),
		Labels:           map[string]string{"data": rapid.SampledFrom([]string{"personal", "public"}).Draw(t, "job_label")},
		GPUCount:         rapid.IntRange(0, 4).Draw(t, "job_gpus"),
		MinGPUMemoryGB:   rapid.SampledFrom([]int{0, 40, 80}).Draw(t, "job_gpu_mem"),
		Tier:             rapid.SampledFrom([]policy.Tier{policy.TierSpot, policy.TierOnDemand, policy.TierSpotThenOnDemand}).Draw(t, "job_tier"),
		ExpectedDuration: time.Duration(rapid.IntRange(1, 48*60).Draw(t, "minutes")) * time.Minute,
	}
	if rapid.Bool().Draw(t, "has_cards") {
		j.Cards = rapid.SliceOfNDistinct(rapid.SampledFrom(propCards), 1, 3, rapid.ID).Draw(t, "cards")
	}
	if rapid.Bool().Draw(t, "job_residency") {
		j.Residency = rapid.SampledFrom(propClasses).Draw(t, "job_class")
	}
	if rapid.Bool().Draw(t, "has_cap") {
		j.MaxPricePerHour = ptr(genMoney(t, "job_cap", 5_000_000))
	}
	if rapid.Bool().Draw(t, "has_job_budget") {
		j.Budget = ptr(genMoney(t, "job_budget", 100_000_000))
	}
	if rapid.Bool().Draw(t, "has_input") {
		j.Inputs = []policy.Input{{
			Provider: rapid.SampledFrom([]string{"", "aws", "hetzner"}).Draw(t, "input_provider"),
			Region:   "r1", Bytes: rapid.Int64Range(0, 2e12).Draw(t, "bytes"),
		}}
	}
	return j
}

// toEUR is the reference conversion: USD at usdRate, truncated to micros.
func toEUR(m policy.Money) int64 {
	if m.Currency == "EUR" {
		return m.Micros
	}
	return m.Micros * int64(usdRate*1e6) / 1e6
}

func inClass(rules policy.Rules, class, country string) bool {
	c, ok := policy.Residency(rules, class)
	return ok && c.Contains(country)
}

func ruleMatches(r policy.Rule, j policy.Requirements) bool {
	if r.Project != "" {
		if ok, _ := path.Match(r.Project, j.Project); !ok {
			return false
		}
	}
	for k, v := range r.Labels {
		if j.Labels[k] != v {
			return false
		}
	}
	return true
}

// referenceTotal is the documented cost model, computed independently:
// each input moved off the provider and region that store it is charged at
// its source's egress price (egress_prices, else the highest that offers
// there state), never at the offer's.
func referenceTotal(j policy.Requirements, rules policy.Rules, offers []policy.Offer, o policy.Offer) int64 {
	price := toEUR(o.PricePerHour)
	mul := func(a, b, c int64) int64 {
		return new(big.Int).Div(new(big.Int).Mul(big.NewInt(a), big.NewInt(b)), big.NewInt(c)).Int64()
	}
	total := mul(price, int64(j.ExpectedDuration), int64(time.Hour))
	if o.Tier == policy.TierSpot {
		rate := 0.1
		if o.PreemptionRate != nil {
			rate = *o.PreemptionRate
		}
		lost := time.Duration(rate * j.ExpectedDuration.Hours() * float64(10*time.Minute))
		total += mul(price, int64(lost), int64(time.Hour))
	}
	for _, in := range j.Inputs {
		if in.Region == o.Region && (in.Provider == "" || in.Provider == o.Provider) {
			continue
		}
		if egress, ok := referenceSourcePrice(in, rules, offers); ok {
			total += mul(in.Bytes, egress, 1e9)
		}
	}
	return total
}

// referenceSourcePrice is the egress price in EUR micros per GB of moving
// in out of where it is stored.
func referenceSourcePrice(in policy.Input, rules policy.Rules, offers []policy.Offer) (int64, bool) {
	for _, e := range rules.EgressPrices {
		if ok, _ := path.Match(e.Region, in.Region); ok || e.Region == "" {
			return toEUR(e.PerGB), true
		}
	}
	price, found := int64(0), false
	for _, o := range offers {
		if o.Region == in.Region && (in.Provider == "" || o.Provider == in.Provider) && o.EgressPerGB != nil {
			price, found = max(price, toEUR(*o.EgressPerGB)), true
		}
	}
	return price, found
}

// checkFeasible fails t when o, one of offers, breaks a constraint job and
// rules impose.
func checkFeasible(t *rapid.T, j policy.Requirements, rules policy.Rules, offers []policy.Offer, o policy.Offer) {
	if j.Residency != "" && !inClass(rules, j.Residency, o.Country) {
		t.Fatalf("%s in %q is outside the job's residency %s", o.Pool, o.Country, j.Residency)
	}
	for _, r := range rules.Rules {
		if ruleMatches(r, j) && r.Residency != "" && !inClass(rules, r.Residency, o.Country) {
			t.Fatalf("%s in %q is outside residency %s of rule %s", o.Pool, o.Country, r.Residency, r.Name)
		}
	}
	if j.MaxPricePerHour != nil && toEUR(o.PricePerHour) > toEUR(*j.MaxPricePerHour) {
		t.Fatalf("%s costs %s/h over the cap %s", o.Pool, o.PricePerHour, j.MaxPricePerHour)
	}
	total := referenceTotal(j, rules, offers, o)
	if j.Budget != nil && total > toEUR(*j.Budget) {
		t.Fatalf("%s costs %d over the job budget %s", o.Pool, total, j.Budget)
	}
	for _, b := range rules.Budgets {
		if b.Project == j.Project && total > toEUR(b.Cap)-toEUR(b.Spent) {
			t.Fatalf("%s costs %d over the remaining budget", o.Pool, total)
		}
	}
	if len(j.Cards) > 0 && !slices.Contains(j.Cards, o.Card) {
		t.Fatalf("%s has card %s, job accepts %v", o.Pool, o.Card, j.Cards)
	}
}

func TestPlaceProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		job, offers, rules := genJob(t), genOffers(t), genRules(t)
		d, err := policy.Place(job, offers, rules, now)
		var refusal *policy.NoPlacementError
		if errors.As(err, &refusal) {
			d = refusal.Decision
		} else if err != nil {
			t.Fatalf("Place: %v", err)
		}
		if d.Feasible+len(d.Rejected()) != len(offers) {
			t.Fatalf("%d feasible + %d rejected != %d offers", d.Feasible, len(d.Rejected()), len(offers))
		}
		for _, r := range d.Rejected() {
			if len(r.Reasons) == 0 {
				t.Fatalf("%s rejected without a reason", d.Offers[r.Offer].Pool)
			}
		}
		checkReasons(t, d)
		if d.Chosen == nil {
			if d.Feasible != 0 || err == nil {
				t.Fatalf("no choice among %d feasible offers, err %v", d.Feasible, err)
			}
			return
		}
		kept := append([]policy.Candidate{*d.Chosen}, d.Alternatives...)
		if len(kept) != d.Feasible {
			t.Fatalf("kept %d of %d feasible offers", len(kept), d.Feasible)
		}
		for _, c := range kept {
			checkFeasible(t, job, rules, offers, c.Offer)
			if want := referenceTotal(job, rules, offers, c.Offer); c.Cost.Total.Micros != want {
				t.Fatalf("%s total %d, reference %d", c.Offer.Pool, c.Cost.Total.Micros, want)
			}
		}
		for i := 1; i < len(kept); i++ {
			if kept[i].Cost.Total.Micros < kept[i-1].Cost.Total.Micros {
				t.Fatalf("rank %d (%s) is cheaper than rank %d", i+1, kept[i].Cost.Total, i)
			}
		}
		shuffled := rapid.Permutation(offers).Draw(t, "shuffled")
		again, _ := policy.Place(job, shuffled, rules, now)
		if again.Chosen == nil || again.Chosen.Offer.Pool != d.Chosen.Offer.Pool || len(again.Alternatives) != len(d.Alternatives) {
			t.Fatalf("shuffled offers changed the decision")
		}
		for i := range d.Alternatives {
			if again.Alternatives[i].Offer.Pool != d.Alternatives[i].Offer.Pool {
				t.Fatalf("shuffled offers changed alternative %d", i+1)
			}
		}
	})
}

func TestReplaceNeverWidensResidencyProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		job, offers, rules := genJob(t), genOffers(t), genRules(t)
		first, err := policy.Place(job, offers, rules, now)
		if err != nil {
			var refusal *policy.NoPlacementError
			if !errors.As(err, &refusal) {
				t.Fatalf("Place: %v", err)
			}
			first = refusal.Decision
		}
		// The rules, the job's own class and the offers may all change.
		job.Residency = rapid.SampledFrom(append([]string{""}, propClasses...)).Draw(t, "new_class")
		next, err := policy.Replace(job, genOffers(t), genRules(t), first, policy.History{}, now.Add(time.Hour))
		var refusal *policy.NoPlacementError
		if errors.As(err, &refusal) {
			next = refusal.Decision
		} else if err != nil {
			t.Fatalf("Replace: %v", err)
		}
		if !first.Residency.Restricted() {
			return
		}
		for _, c := range next.Residency.Countries {
			if !first.Residency.Contains(c) {
				t.Fatalf("re-placement widened residency %v to %v", first.Residency.Countries, next.Residency.Countries)
			}
		}
		if next.Chosen != nil && !first.Residency.Contains(next.Chosen.Offer.Country) {
			t.Fatalf("re-placed into %s outside %s", next.Chosen.Offer.Country, first.Residency.Class)
		}
		for _, a := range next.Alternatives {
			if !first.Residency.Contains(a.Offer.Country) {
				t.Fatalf("alternative in %s outside %s", a.Offer.Country, first.Residency.Class)
			}
		}
	})
}

func TestOfferSetDecidesAsPlaceForEveryJobProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		offers := genOffers(t)
		set := policy.NewOfferSet(offers)
		// One set serves several jobs under several rule sets.
		for range 3 {
			job, rules := genJob(t), genRules(t)
			want, wantErr := policy.Place(job, offers, rules, now)
			got, gotErr := set.Place(job, rules, now)
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(want)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !bytes.Equal(gotJSON, wantJSON) {
				t.Fatalf("offer set decided\n%s, %v\nPlace decided\n%s, %v", gotJSON, gotErr, wantJSON, wantErr)
			}
			checkReasons(t, got)
		}
	})
}

// checkReasons fails t unless every rejection names reasons in the table,
// in the order the checks run, and the table words each reason once.
func checkReasons(t *rapid.T, d policy.Decision) {
	seen := map[policy.Reason]bool{}
	for _, r := range d.Reasons() {
		if seen[r] {
			t.Fatalf("reason %+v worded twice", r)
		}
		seen[r] = true
	}
	order := map[policy.ReasonCode]int{}
	for i, c := range []policy.ReasonCode{policy.ReasonInvalidOffer, policy.ReasonResidency, policy.ReasonProviderRule,
		policy.ReasonProvider, policy.ReasonRegion, policy.ReasonTier, policy.ReasonEscalated, policy.ReasonAvoided,
		policy.ReasonAvailability, policy.ReasonCard, policy.ReasonGPUPool, policy.ReasonGPUCount, policy.ReasonGPUMemory, policy.ReasonVCPU,
		policy.ReasonMemory, policy.ReasonCurrency, policy.ReasonPriceCap, policy.ReasonJobBudget,
		policy.ReasonProjectBudget, policy.ReasonDeadline} {
		order[c] = i
	}
	for _, r := range d.Rejected() {
		if r.Offer < 0 || r.Offer >= len(d.Offers) {
			t.Fatalf("rejection names offer %d of %d", r.Offer, len(d.Offers))
		}
		for i, k := range r.Reasons {
			if k < 0 || int(k) >= len(d.Reasons()) {
				t.Fatalf("%s names reason %d of %d", d.Offers[r.Offer].Pool, k, len(d.Reasons()))
			}
			if i > 0 && order[d.Reasons()[k].Code] <= order[d.Reasons()[r.Reasons[i-1]].Code] {
				t.Fatalf("%s reasons out of order: %+v", d.Offers[r.Offer].Pool, d.ReasonsOf(r))
			}
		}
	}
}

// TestRejectedOffersCarryBudgetReasonsProperty checks that an offer
// rejected for anything carries a budget reason exactly when the reference
// cost model puts it over that budget.
func TestRejectedOffersCarryBudgetReasonsProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		job, offers, rules := genJob(t), genOffers(t), genRules(t)
		d, err := policy.Place(job, offers, rules, now)
		if refusal := (*policy.NoPlacementError)(nil); errors.As(err, &refusal) {
			d = refusal.Decision
		} else if err != nil {
			t.Fatalf("Place: %v", err)
		}
		for _, r := range d.Rejected() {
			o := d.Offers[r.Offer]
			has := map[policy.ReasonCode]bool{}
			for _, reason := range d.ReasonsOf(r) {
				has[reason.Code] = true
			}
			total := referenceTotal(job, rules, offers, o)
			if want := job.Budget != nil && total > toEUR(*job.Budget); has[policy.ReasonJobBudget] != want {
				t.Fatalf("%s costs %d, job budget %v: job budget reason %v, want %v", o.Pool, total, job.Budget, has[policy.ReasonJobBudget], want)
			}
			over := false
			for _, b := range rules.Budgets {
				over = over || b.Project == job.Project && total > toEUR(b.Cap)-toEUR(b.Spent)
			}
			if has[policy.ReasonProjectBudget] != over {
				t.Fatalf("%s costs %d: project budget reason %v, want %v", o.Pool, total, has[policy.ReasonProjectBudget], over)
			}
		}
	})
}
