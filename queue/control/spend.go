package control

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/gpuq/gpuq/queue"
)

// SpendStore is what the spend view reads: the instances billed in a window
// and the attempts that ran on them.
type SpendStore interface {
	BilledInstances(ctx context.Context, since time.Time) ([]*queue.Instance, error)
	InstanceAttempts(ctx context.Context, ids []string) ([]queue.InstanceAttempt, error)
}

// InstanceSpend is what one instance cost: its billed time, rounded up to
// its billing unit, at its price, split into the share of each attempt that
// ran on it and idle time.
type InstanceSpend struct {
	ID            string `json:"id"`
	Pool          string `json:"pool"`
	State         string `json:"state"`
	Currency      string `json:"currency"`
	BilledSeconds int64  `json:"billed_seconds"`
	CostMicros    int64  `json:"cost_micros"`
	JobsMicros    int64  `json:"jobs_micros"`
	IdleMicros    int64  `json:"idle_micros"`
}

// SpendLine is a sum over instances for one key (a pool, a project, or
// idle) in one currency.
type SpendLine struct {
	Key           string `json:"key"`
	Currency      string `json:"currency"`
	BilledSeconds int64  `json:"billed_seconds,omitempty"`
	Micros        int64  `json:"micros"`
	IdleMicros    int64  `json:"idle_micros,omitempty"`
}

// SpendReport is the spend of the instances billed since a time, from
// instance-hours: per instance, per pool, per project (the attempts' shares)
// and idle, with totals per currency.
type SpendReport struct {
	Since     time.Time       `json:"since"`
	At        time.Time       `json:"at"`
	Instances []InstanceSpend `json:"instances"`
	Pools     []SpendLine     `json:"pools"`
	Projects  []SpendLine     `json:"projects"`
	// Totals per currency; IdleMicros is what no job used.
	Totals []SpendLine `json:"totals"`
}

// Spend reads the instances billed since a time and prices them up to now.
func Spend(ctx context.Context, s SpendStore, since, now time.Time) (*SpendReport, error) {
	instances, err := s.BilledInstances(ctx, since)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(instances))
	for i, in := range instances {
		ids[i] = in.ID
	}
	attempts, err := s.InstanceAttempts(ctx, ids)
	if err != nil {
		return nil, err
	}
	r := SpendOf(instances, attempts, now)
	r.Since = since
	return &r, nil
}

// BilledSeconds is the instance's billed time up to now: from its launch to
// its end, rounded up to a whole second or hour as its provider bills.
func BilledSeconds(in *queue.Instance, now time.Time) int64 {
	if in.LaunchedAt == nil {
		return 0
	}
	d := deref(in.EndedAt, now).Sub(*in.LaunchedAt)
	if d <= 0 {
		return 0
	}
	unit := time.Second
	if in.Billing == queue.BillPerHour {
		unit = time.Hour
	}
	units := int64((d + unit - 1) / unit)
	return units * int64(unit/time.Second)
}

// InstanceCost is what the instance costs for its billed time, in micros of
// its currency: price per hour × billed seconds / 3600, rounded down.
func InstanceCost(in *queue.Instance, now time.Time) int64 {
	return in.PriceMicros * BilledSeconds(in, now) / 3600
}

// SpendOf prices instances and attributes each one's cost to the attempts
// that ran on it: an attempt's share is the instance's price over the time
// it ran on it, divided by the instance's slots. What no attempt used is
// idle, so per instance jobs + idle = cost.
func SpendOf(instances []*queue.Instance, attempts []queue.InstanceAttempt, now time.Time) SpendReport {
	r := SpendReport{At: now, Instances: []InstanceSpend{}, Totals: []SpendLine{}}
	on := map[string][]queue.InstanceAttempt{}
	for _, a := range attempts {
		on[a.InstanceID] = append(on[a.InstanceID], a)
	}
	pools, projects, totals := map[[2]string]*SpendLine{}, map[[2]string]*SpendLine{}, map[string]*SpendLine{}
	line := func(m map[[2]string]*SpendLine, key, cur string) *SpendLine {
		k := [2]string{key, cur}
		if m[k] == nil {
			m[k] = &SpendLine{Key: key, Currency: cur}
		}
		return m[k]
	}
	for _, in := range instances {
		s := InstanceSpend{ID: in.ID, Pool: in.Pool, State: string(in.State), Currency: in.Currency,
			BilledSeconds: BilledSeconds(in, now), CostMicros: InstanceCost(in, now)}
		if in.LaunchedAt != nil {
			start, end := *in.LaunchedAt, deref(in.EndedAt, now)
			for _, a := range on[in.ID] {
				from, to := maxTime(a.From, start), minTime(a.To, end)
				if !to.After(from) {
					continue
				}
				share := in.PriceMicros * int64(to.Sub(from)/time.Millisecond) / (3600 * 1000 * int64(max(in.Slots, 1)))
				share = min(share, s.CostMicros-s.JobsMicros)
				s.JobsMicros += share
				line(projects, a.Project, in.Currency).Micros += share
			}
		}
		s.IdleMicros = s.CostMicros - s.JobsMicros
		r.Instances = append(r.Instances, s)
		p := line(pools, in.Pool, in.Currency)
		p.BilledSeconds += s.BilledSeconds
		p.Micros += s.CostMicros
		p.IdleMicros += s.IdleMicros
		if totals[in.Currency] == nil {
			totals[in.Currency] = &SpendLine{Key: "total", Currency: in.Currency}
		}
		t := totals[in.Currency]
		t.BilledSeconds += s.BilledSeconds
		t.Micros += s.CostMicros
		t.IdleMicros += s.IdleMicros
	}
	r.Pools, r.Projects = sortedLines(pools), sortedLines(projects)
	for _, t := range totals {
		r.Totals = append(r.Totals, *t)
	}
	slices.SortFunc(r.Totals, func(a, b SpendLine) int { return strings.Compare(a.Currency, b.Currency) })
	return r
}

func sortedLines(m map[[2]string]*SpendLine) []SpendLine {
	out := make([]SpendLine, 0, len(m))
	for _, l := range m {
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b SpendLine) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return strings.Compare(a.Currency, b.Currency)
	})
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
