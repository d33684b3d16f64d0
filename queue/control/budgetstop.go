package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
)

// BudgetStopStore is what the budget stop reads and writes.
type BudgetStopStore interface {
	RunningSpend(ctx context.Context) ([]queue.RunningSpend, error)
	Spend(ctx context.Context, project string, since time.Time) (map[string]int64, error)
	Fail(ctx context.Context, id uuid.UUID, attempt int, outcome string, exit *int, reason string) error
}

// BudgetStop stops the running jobs whose spend has reached a budget: the
// job's own spec.budget.total (what all its attempts accrued) or a budget of
// its project in the current period (Rules.Budgets, charged with what the
// project's attempts accrued). Placement reserves each job's estimate, so a
// job that runs longer than it said is what reaches a budget.
//
// The job's worker is asked to stop it as on a preemption notice: SIGTERM,
// the grace to save a final checkpoint, which is recorded, and the job ends
// failed with outcome over_budget and the reason. A job still running under
// the same attempt Grace after the request is ended so by the control plane
// itself, which fences its worker out. Each stop is alerted once per
// leader: the job's failed event carries the reason, and Webhook, when set,
// is POSTed a BudgetAlert.
type BudgetStop struct {
	Store BudgetStopStore
	// NATS carries the stop requests to the workers.
	NATS  queue.StopPublisher
	Rules policy.Rules
	// Policy, when set, gives the rules in effect at each pass (a
	// PolicyWatch), and Rules is unused.
	Policy RulesSource
	BudgetStopConfig
	// Client posts the alerts. Default: a client with a 10 s timeout.
	Client *http.Client
	Logger *slog.Logger

	mu       sync.Mutex
	stopping map[uuid.UUID]stopRequest
	alerts   sync.WaitGroup
}

// BudgetStopConfig is the budget_stop key of the configuration.
type BudgetStopConfig struct {
	// Interval between checks. Default 10s.
	Interval time.Duration `mapstructure:"interval" json:"interval"`
	// Grace is how long a worker has to stop a job before the control
	// plane ends it. Default 2m: the worker's own grace (20 s by default)
	// plus packing and uploading the final checkpoint.
	Grace time.Duration `mapstructure:"grace" json:"grace"`
	// Webhook is an http(s) URL POSTed a BudgetAlert for every stop.
	Webhook string `mapstructure:"webhook" json:"webhook"`
}

// WithDefaults fills the unset fields.
func (c BudgetStopConfig) WithDefaults() BudgetStopConfig {
	if c.Interval == 0 {
		c.Interval = 10 * time.Second
	}
	if c.Grace == 0 {
		c.Grace = 2 * time.Minute
	}
	return c
}

// Validate names the first field that is wrong.
func (c BudgetStopConfig) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.Interval < 100*time.Millisecond:
		return fmt.Errorf("budget_stop.interval: must be at least 100ms, got %s", c.Interval)
	case c.Grace < time.Second:
		return fmt.Errorf("budget_stop.grace: must be at least 1s, got %s", c.Grace)
	}
	if c.Webhook != "" {
		u, err := url.Parse(c.Webhook)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("budget_stop.webhook: must be an http or https URL")
		}
	}
	return nil
}

// BudgetAlert is what the webhook is POSTed (application/json).
type BudgetAlert struct {
	Type    string    `json:"type"` // "budget.reached"
	JobID   uuid.UUID `json:"job_id"`
	Project string    `json:"project"`
	Attempt int       `json:"attempt"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

type stopRequest struct {
	attempt int
	at      time.Time
	reason  string
}

// Run checks every Interval until ctx ends.
func (b *BudgetStop) Run(ctx context.Context) error {
	cfg := b.BudgetStopConfig.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if b.Store == nil || b.NATS == nil {
		return errors.New("budget_stop: store and nats must be set")
	}
	defer b.alerts.Wait()
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		if _, err := b.Pass(ctx, time.Now()); err != nil && ctx.Err() == nil {
			b.logger().Warn("checking running jobs against their budgets", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (b *BudgetStop) logger() *slog.Logger {
	if b.Logger == nil {
		return slog.Default()
	}
	return b.Logger
}

// Pass checks every running job once and returns the jobs it asked to stop
// or ended.
func (b *BudgetStop) Pass(ctx context.Context, now time.Time) ([]uuid.UUID, error) {
	cfg := b.BudgetStopConfig.WithDefaults()
	running, err := b.Store.RunningSpend(ctx)
	if err != nil {
		return nil, err
	}
	rules := b.Rules
	if b.Policy != nil {
		rules = b.Policy.Rules()
	}
	conv, err := rules.Converter()
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopping == nil {
		b.stopping = map[uuid.UUID]stopRequest{}
	}
	still := make(map[uuid.UUID]bool, len(running))
	projects := map[string]string{}
	var acted []uuid.UUID
	var errs []error
	for _, j := range running {
		still[j.JobID] = true
		reason := jobOverBudget(j, conv)
		if reason == "" {
			over, seen := projects[j.Project]
			if !seen {
				if over, err = b.projectOverBudget(ctx, rules, j.Project, now, conv); err != nil {
					errs = append(errs, err)
				}
				projects[j.Project] = over
			}
			reason = over
		}
		if reason == "" {
			continue
		}
		req, asked := b.stopping[j.JobID]
		switch {
		case asked && req.attempt == j.Attempt && now.Sub(req.at) < cfg.Grace:
			continue
		case asked && req.attempt == j.Attempt:
			// The worker did not stop it: end it here, which fences the
			// worker out at its next heartbeat.
			err := b.Store.Fail(ctx, j.JobID, j.Attempt, queue.OutcomeOverBudget, nil,
				fmt.Sprintf("%s; its worker did not stop it within %s, so the control plane ended it", req.reason, cfg.Grace))
			if err != nil && !errors.Is(err, queue.ErrFenced) {
				errs = append(errs, fmt.Errorf("ending job %s: %w", j.JobID, err))
				continue
			}
			b.logger().Warn("ended a job over budget that its worker did not stop", "job", j.JobID, "attempt", j.Attempt, "reason", req.reason)
			delete(b.stopping, j.JobID)
			acted = append(acted, j.JobID)
			continue
		}
		if err := queue.NotifyStop(b.NATS, j.JobID, reason); err != nil {
			errs = append(errs, fmt.Errorf("asking to stop job %s: %w", j.JobID, err))
			continue
		}
		b.logger().Warn("stopping a job over budget", "job", j.JobID, "project", j.Project, "attempt", j.Attempt, "reason", reason)
		b.stopping[j.JobID] = stopRequest{attempt: j.Attempt, at: now, reason: reason}
		acted = append(acted, j.JobID)
		if cfg.Webhook != "" {
			b.alert(ctx, cfg.Webhook, BudgetAlert{Type: "budget.reached", JobID: j.JobID, Project: j.Project, Attempt: j.Attempt, Reason: reason, At: now.UTC()})
		}
	}
	for id := range b.stopping {
		if !still[id] {
			delete(b.stopping, id)
		}
	}
	return acted, errors.Join(errs...)
}

// jobOverBudget says why j's accrued spend reached its own budget.total, or
// "" when it has not (or has none).
func jobOverBudget(j queue.RunningSpend, conv policy.Converter) string {
	if j.BudgetTotal == "" {
		return ""
	}
	total, err := policy.ParseMoney(j.BudgetTotal)
	if err != nil {
		return "" // the parser refused it at submission; nothing to hold it to
	}
	// Spend in other currencies counts at the rules' rates: unit is what one
	// unit of the budget's currency is worth in the base currency.
	unit, unitOK := conv.ToBase(policy.Money{Micros: 1_000_000, Currency: total.Currency})
	spent, comparable := int64(0), true
	for currency, micros := range j.Micros {
		if currency == total.Currency {
			spent += micros
			continue
		}
		v, ok := conv.ToBase(policy.Money{Micros: micros, Currency: currency})
		if !ok || !unitOK || unit == 0 {
			comparable = false
			continue
		}
		spent += v * 1_000_000 / unit
	}
	if spent < total.Micros {
		return ""
	}
	note := ""
	if !comparable {
		note = " (spend in currencies without an exchange rate not counted)"
	}
	return fmt.Sprintf("over budget: the job's attempts spent %s, reaching its budget.total %s%s",
		reached(policy.Money{Micros: spent, Currency: total.Currency}, total.Micros), total, note)
}

// reached is spent, which reached a cap of capMicros, as reasons show it:
// rounded to a hundredth of its unit, or exactly when the rounding would
// show less than the cap (a cap under a cent: "spent 0.00 EUR, reaching
// cap 0.001 EUR" would say nothing).
func reached(spent policy.Money, capMicros int64) policy.Money {
	if r := (spent.Micros + 5_000) / 10_000 * 10_000; r >= capMicros {
		spent.Micros = r
	}
	return spent
}

// projectOverBudget says which budget of project its accrued spend in the
// current period reached, or "".
func (b *BudgetStop) projectOverBudget(ctx context.Context, rules policy.Rules, project string, now time.Time, conv policy.Converter) (string, error) {
	spend := map[time.Time]map[string]int64{}
	for _, since := range rules.BudgetPeriods(project, now) {
		s, err := b.Store.Spend(ctx, project, since)
		if err != nil {
			return "", err
		}
		spend[since] = s
	}
	if len(spend) == 0 {
		return "", nil
	}
	charged, err := rules.ChargeBudgets(project, now, func(since time.Time) map[string]int64 { return spend[since] })
	if err != nil {
		return "", err
	}
	for i, bud := range charged.Budgets {
		if ok, _ := path.Match(bud.Project, project); !ok {
			continue
		}
		limit, ok := conv.ToBase(bud.Cap)
		if !ok || bud.Spent.Micros < limit {
			continue
		}
		period := bud.Period
		if period == "" {
			period = "total"
		}
		return fmt.Sprintf("over budget: project %s spent %s (%s), reaching budgets[%d] (%s %s cap %s)",
			project, reached(bud.Spent, limit), period, i, bud.Project, period, bud.Cap), nil
	}
	return "", nil
}

// alert POSTs a to the webhook in the background, trying three times.
func (b *BudgetStop) alert(ctx context.Context, webhook string, a BudgetAlert) {
	client := b.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	body, _ := json.Marshal(a)
	b.alerts.Add(1)
	go func() {
		defer b.alerts.Done()
		var err error
		for try := range 3 {
			if try > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(queue.RetryDelay(try, time.Second, 10*time.Second)):
				}
			}
			if err = postAlert(ctx, client, webhook, body); err == nil {
				return
			}
		}
		b.logger().Error("budget alert webhook failed", "job", a.JobID, "err", err)
	}()
}

func postAlert(ctx context.Context, client *http.Client, webhook string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, webhook, bytes.NewReader(body))
	if err != nil {
		return errors.New("building the request")
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		// The URL may carry a token: say what failed, not where.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			return fmt.Errorf("posting the alert: %w", uerr.Err)
		}
		return errors.New("posting the alert failed")
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the webhook answered %s", resp.Status)
	}
	return nil
}
