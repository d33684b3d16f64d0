package policy

import (
	"fmt"
	"math"
	"path"
	"slices"
	"sort"
	"strings"
	"time"
)

// PeriodStart is when the budget period containing now began, in UTC: the
// day, the week (from Monday), the month, the quarter or the year; the zero
// time for a "total" budget.
func PeriodStart(period string, now time.Time) time.Time {
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

// SpendSince is what a project's attempts started since a time have cost,
// in micros per currency.
type SpendSince func(since time.Time) map[string]int64

// BudgetPeriods returns the distinct period starts of the budgets that match
// project at now, earliest first: the spend a caller must read to charge
// them.
func (r Rules) BudgetPeriods(project string, now time.Time) []time.Time {
	var out []time.Time
	for _, b := range r.Budgets {
		if ok, _ := path.Match(b.Project, project); !ok {
			continue
		}
		since := PeriodStart(b.Period, now)
		if !slices.ContainsFunc(out, since.Equal) {
			out = append(out, since)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// ChargeBudgets returns r with each budget that matches project charged with
// the project's spend in the budget's current period, converted into the
// base currency with integer micros. A spend in a currency without an
// exchange rate is an error naming the budget.
func (r Rules) ChargeBudgets(project string, now time.Time, spent SpendSince) (Rules, error) {
	if len(r.Budgets) == 0 || spent == nil {
		return r, nil
	}
	conv, err := r.Converter()
	if err != nil {
		return r, err
	}
	base := conv.Base()
	r.Budgets = slices.Clone(r.Budgets)
	for i, b := range r.Budgets {
		if ok, _ := path.Match(b.Project, project); !ok {
			continue
		}
		spend := spent(PeriodStart(b.Period, now))
		total := int64(0)
		if b.Spent.Micros != 0 {
			v, ok := conv.ToBase(b.Spent)
			if !ok {
				return r, fmt.Errorf("budgets[%d].spent: unknown currency %q (not %s and not in exchange_rates)", i, b.Spent.Currency, base)
			}
			total += v
		}
		for _, currency := range sortedKeys(spend) {
			m := Money{Micros: spend[currency], Currency: currency}
			v, ok := conv.ToBase(m)
			if !ok {
				return r, fmt.Errorf("budgets[%d]: project %s has spent %s, which has no exchange rate to %s; add exchange_rates.%s", i, project, m, base, currency)
			}
			total = addSat(total, v)
		}
		r.Budgets[i].Spent = Money{Micros: total, Currency: base}
	}
	return r, nil
}

// Converter converts money into the base currency of rules with integer
// micros, the same way placement does.
type Converter struct {
	r rates
}

// Converter returns the rules' converter; an invalid rate or base currency
// is an error naming the key.
func (r Rules) Converter() (Converter, error) {
	r = r.WithDefaults()
	if !validCurrency(r.BaseCurrency) {
		return Converter{}, fmt.Errorf("base_currency: %q is not an ISO 4217 currency code", r.BaseCurrency)
	}
	c := Converter{r: rates{base: r.BaseCurrency, rate: map[string]int64{}}}
	for _, cur := range sortedKeys(r.ExchangeRates) {
		v := r.ExchangeRates[cur]
		up := strings.ToUpper(cur)
		if !validCurrency(up) {
			return Converter{}, fmt.Errorf("exchange_rates.%s: not an ISO 4217 currency code", cur)
		}
		if !(v > 0) || v > 1e6 {
			return Converter{}, fmt.Errorf("exchange_rates.%s: must be a positive number, got %v", cur, v)
		}
		c.r.set(up, rateMicros(v))
	}
	return c, nil
}

// Base is the base currency.
func (c Converter) Base() string { return c.r.base }

// ToBase converts m into base micros (rounded down); false when its currency
// has no rate.
func (c Converter) ToBase(m Money) (int64, bool) {
	if m.Currency != c.r.base {
		if _, ok := c.r.lookup(strings.ToUpper(m.Currency)); ok {
			m.Currency = strings.ToUpper(m.Currency)
		}
	}
	return c.r.toBase(m)
}

// Rates lists each currency with the base micros one unit of it is worth,
// the base currency included at one unit, sorted by currency: what a store
// needs to convert spend exactly as ToBase does.
func (c Converter) Rates() (currencies []string, micros []int64) {
	currencies = append(currencies, c.r.base)
	micros = append(micros, microsPerUnit)
	for _, cur := range sortedKeys(c.r.rate) {
		if cur == c.r.base {
			continue
		}
		currencies = append(currencies, cur)
		micros = append(micros, c.r.rate[cur])
	}
	return currencies, micros
}

// BudgetGuard is what committing a placement re-checks against the spend
// recorded at commit time: the spend of Project since Since, converted into
// the base currency, plus Cost must stay within Limit (base micros). Budget
// names the budget for the rejection reason.
type BudgetGuard struct {
	Budget  int
	Project string
	Since   time.Time
	Limit   int64
	Cost    int64
}

// BudgetGuards returns the guards of a decision for project: one per budget
// that matches it, each holding the chosen offer's estimated total cost.
// Limits are the budgets' caps less what the rules themselves say is spent
// or reserved, before any charged spend; rules must be the uncharged ones.
func (r Rules) BudgetGuards(project string, d Decision, now time.Time) ([]BudgetGuard, error) {
	if d.Chosen == nil || len(r.Budgets) == 0 {
		return nil, nil
	}
	conv, err := r.Converter()
	if err != nil {
		return nil, err
	}
	cost, ok := conv.ToBase(d.Chosen.Cost.Total)
	if !ok {
		return nil, fmt.Errorf("decision cost %s: unknown currency", d.Chosen.Cost.Total)
	}
	var out []BudgetGuard
	for i, b := range r.Budgets {
		if ok, _ := path.Match(b.Project, project); !ok {
			continue
		}
		limit, ok := conv.ToBase(b.Cap)
		if !ok {
			return nil, fmt.Errorf("budgets[%d].cap: unknown currency %q", i, b.Cap.Currency)
		}
		for _, m := range []Money{b.Spent, b.Reserved} {
			if m.Micros == 0 {
				continue
			}
			v, ok := conv.ToBase(m)
			if !ok {
				return nil, fmt.Errorf("budgets[%d]: unknown currency %q", i, m.Currency)
			}
			limit -= v
		}
		out = append(out, BudgetGuard{Budget: i, Project: project, Since: PeriodStart(b.Period, now), Limit: limit, Cost: cost})
	}
	return out, nil
}

// GuardReason is the rejection reason of a placement whose guard failed at
// commit time.
func (r Rules) GuardReason(g BudgetGuard) string {
	b := r.Budgets[g.Budget]
	return fmt.Sprintf("budget %s (%s cap %s): spend recorded and reserved by placed jobs leaves less than the estimated cost %s", b.Project, b.Period, b.Cap, Money{Micros: g.Cost, Currency: r.WithDefaults().BaseCurrency})
}

// rateMicros is an exchange rate as base micros per unit, as compile sets it.
func rateMicros(v float64) int64 { return int64(math.Round(v * microsPerUnit)) }
