package control

import (
	"context"
	"path"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
)

// LedgerStore is what the budget ledger reads.
type LedgerStore interface {
	Spend(ctx context.Context, project string, since time.Time) (map[string]int64, error)
	Reserved(ctx context.Context, project string) (map[string]int64, error)
	Ledger(ctx context.Context, projects []string, since time.Time, max int) ([]queue.LedgerEntry, error)
}

// LedgerJobs is the most jobs a ledger lists.
const LedgerJobs = 1000

// LedgerAmount is a project's spend in one currency: what its attempts
// started since the ledger's start accrued, and what its unfinished jobs
// still reserve against its budgets (their estimates less what they
// accrued).
type LedgerAmount struct {
	Currency       string `json:"currency"`
	Micros         int64  `json:"micros"`
	ReservedMicros int64  `json:"reserved_micros"`
}

// LedgerLine sums the ledger's jobs placed at one provider and region, in
// one currency: their estimates, what they accrued and what they still
// reserve.
type LedgerLine struct {
	Provider        string `json:"provider"`
	Region          string `json:"region"`
	Currency        string `json:"currency"`
	Jobs            int    `json:"jobs"`
	EstimatedMicros int64  `json:"estimated_micros"`
	AccruedMicros   int64  `json:"accrued_micros"`
	ReservedMicros  int64  `json:"reserved_micros"`
}

// LedgerJob is one job of the ledger in one currency: its current
// placement's estimate, what its attempts accrued, and what it still
// reserves (nothing once it finished: the unused part is released).
type LedgerJob struct {
	JobID           uuid.UUID      `json:"job_id"`
	Name            string         `json:"name"`
	State           queue.JobState `json:"state"`
	Provider        string         `json:"provider"`
	Region          string         `json:"region"`
	Pool            string         `json:"pool"`
	Currency        string         `json:"currency"`
	EstimatedMicros int64          `json:"estimated_micros"`
	AccruedMicros   int64          `json:"accrued_micros"`
	ReservedMicros  int64          `json:"reserved_micros"`
}

// Ledger is a project's budget ledger since a time: totals per currency,
// per provider and region, and per job, estimated against accrued.
type Ledger struct {
	Project string         `json:"project"`
	Since   time.Time      `json:"since"`
	Amounts []LedgerAmount `json:"amounts"`
	Places  []LedgerLine   `json:"places"`
	Jobs    []LedgerJob    `json:"jobs"`
	// Truncated is set when the project had more than LedgerJobs jobs to
	// list; the totals still count them all.
	Truncated bool `json:"truncated,omitempty"`
	// Budgets are the budgets of the policy in effect that apply to the
	// project, each with what the project used of it in its current
	// period (whatever the ledger's since).
	Budgets []BudgetUsage `json:"budgets" doc:"every budget of the policy in effect that applies to the project, with its use in the budget's current period (whatever since is)"`
}

// BudgetUsage is one budget that applies to a project with what the
// project has used of it in the current period, in the policy's base
// currency.
type BudgetUsage struct {
	// Budget is the budget's project: the project's own name or a glob
	// that matches it.
	Budget      string    `json:"budget" doc:"the budget's project: this project's name, or a glob matching it (set in the global policy)"`
	Cap         string    `json:"cap"`
	Period      string    `json:"period"`
	PeriodStart time.Time `json:"period_start" doc:"start of the current period (UTC); zero for total"`
	// Spent is what the project's attempts started in the period accrued.
	Spent string `json:"spent"`
	// Reserved is what its unfinished jobs still hold of their estimates.
	Reserved  string `json:"reserved"`
	Remaining string `json:"remaining" doc:"cap less spent and reserved; negative when over"`
}

// BudgetUsages lists the budgets of rules that apply to project, each with
// what the project spent in its current period at now and what its
// unfinished jobs reserve, as placement counts them.
func BudgetUsages(ctx context.Context, s LedgerStore, project string, rules policy.Rules, now time.Time) ([]BudgetUsage, error) {
	out := []BudgetUsage{}
	conv, err := rules.Converter()
	if err != nil {
		return nil, err
	}
	base := conv.Base()
	now = now.UTC()
	var reserved int64
	spent := map[time.Time]int64{}
	for _, b := range rules.Budgets {
		if ok, _ := path.Match(b.Project, project); !ok {
			continue
		}
		if len(out) == 0 {
			r, err := s.Reserved(ctx, project)
			if err != nil {
				return nil, err
			}
			reserved = toBase(conv, r)
		}
		since := policy.PeriodStart(b.Period, now)
		if _, ok := spent[since]; !ok {
			m, err := s.Spend(ctx, project, since)
			if err != nil {
				return nil, err
			}
			spent[since] = toBase(conv, m)
		}
		limit, _ := conv.ToBase(b.Cap)
		used := spent[since] + reserved
		for _, m := range []policy.Money{b.Spent, b.Reserved} {
			if v, ok := conv.ToBase(m); ok && m.Micros != 0 {
				used += v
			}
		}
		money := func(v int64) string { return policy.Money{Micros: v, Currency: base}.String() }
		out = append(out, BudgetUsage{Budget: b.Project, Cap: b.Cap.String(), Period: b.Period, PeriodStart: since,
			Spent: money(spent[since]), Reserved: money(reserved), Remaining: money(limit - used)})
	}
	return out, nil
}

// toBase sums micros per currency in the base currency; currencies
// without an exchange rate are left out (placement refuses them).
func toBase(conv policy.Converter, m map[string]int64) int64 {
	var sum int64
	for c, v := range m {
		if b, ok := conv.ToBase(policy.Money{Micros: v, Currency: c}); ok {
			sum += b
		}
	}
	return sum
}

// ProjectLedger reads a project's ledger since a time.
func ProjectLedger(ctx context.Context, s LedgerStore, project string, since time.Time) (*Ledger, error) {
	spend, err := s.Spend(ctx, project, since)
	if err != nil {
		return nil, err
	}
	reserved, err := s.Reserved(ctx, project)
	if err != nil {
		return nil, err
	}
	entries, err := s.Ledger(ctx, []string{project}, since, LedgerJobs+1)
	if err != nil {
		return nil, err
	}
	l := &Ledger{Project: project, Since: since, Amounts: []LedgerAmount{}, Places: []LedgerLine{}, Jobs: []LedgerJob{}, Budgets: []BudgetUsage{}}
	currencies := map[string]bool{}
	for c := range spend {
		currencies[c] = true
	}
	for c := range reserved {
		currencies[c] = true
	}
	for c := range currencies {
		l.Amounts = append(l.Amounts, LedgerAmount{Currency: c, Micros: spend[c], ReservedMicros: reserved[c]})
	}
	sort.Slice(l.Amounts, func(i, j int) bool { return l.Amounts[i].Currency < l.Amounts[j].Currency })
	if len(entries) > LedgerJobs {
		// A job's currencies are consecutive lines; drop a partial job.
		last := entries[LedgerJobs-1].JobID
		for len(entries) > 0 && entries[len(entries)-1].JobID == last {
			entries = entries[:len(entries)-1]
		}
		l.Truncated = true
	}
	l.Jobs = ledgerJobs(entries)
	places := map[[3]string]*LedgerLine{}
	for _, j := range l.Jobs {
		k := [3]string{j.Provider, j.Region, j.Currency}
		p := places[k]
		if p == nil {
			p = &LedgerLine{Provider: j.Provider, Region: j.Region, Currency: j.Currency}
			places[k] = p
		}
		p.Jobs++
		p.EstimatedMicros += j.EstimatedMicros
		p.AccruedMicros += j.AccruedMicros
		p.ReservedMicros += j.ReservedMicros
	}
	for _, p := range places {
		l.Places = append(l.Places, *p)
	}
	sort.Slice(l.Places, func(i, j int) bool {
		a, b := l.Places[i], l.Places[j]
		if a.Provider != b.Provider {
			return a.Provider < b.Provider
		}
		if a.Region != b.Region {
			return a.Region < b.Region
		}
		return a.Currency < b.Currency
	})
	return l, nil
}

// ledgerJobs turns ledger entries into one line per job and currency: the
// estimate goes on the line of its currency, accrual on the line of the
// currency it was priced in.
func ledgerJobs(entries []queue.LedgerEntry) []LedgerJob {
	out := []LedgerJob{}
	for i := 0; i < len(entries); {
		e := entries[i]
		lines := map[string]*LedgerJob{}
		var order []string
		line := func(cur string) *LedgerJob {
			if l, ok := lines[cur]; ok {
				return l
			}
			l := &LedgerJob{JobID: e.JobID, Name: e.Name, State: e.State, Provider: e.Provider, Region: e.Region, Pool: e.Pool, Currency: cur}
			lines[cur], order = l, append(order, cur)
			return l
		}
		if e.EstimateMicros > 0 || e.EstimateCurrency != "" {
			line(e.EstimateCurrency).EstimatedMicros = e.EstimateMicros
		}
		for ; i < len(entries) && entries[i].JobID == e.JobID; i++ {
			if entries[i].Currency != "" {
				line(entries[i].Currency).AccruedMicros += entries[i].AccruedMicros
			}
		}
		if len(order) == 0 {
			line("")
		}
		for _, cur := range order {
			l := lines[cur]
			if !l.State.Terminal() {
				l.ReservedMicros = max(l.EstimatedMicros-l.AccruedMicros, 0)
			}
			out = append(out, *l)
		}
	}
	return out
}
