package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
)

// PolicyStore keeps the versions of the placement policy (store.Store).
type PolicyStore interface {
	PolicyVersion(ctx context.Context) (*queue.PolicyVersion, error)
	PolicyVersionNumber(ctx context.Context) (int64, error)
	SetPolicy(ctx context.Context, rules json.RawMessage, setBy, comment string, expected *int64) (*queue.PolicyVersion, error)
	PolicyVersions(ctx context.Context, limit int) ([]*queue.PolicyVersion, error)
}

// RulesSource gives the placement rules in effect now.
type RulesSource interface {
	Rules() policy.Rules
}

// Policy sources.
const (
	// PolicySourceConfig: no version was ever set; the server's config
	// file (or --policy file) is in effect.
	PolicySourceConfig = "config"
	// PolicySourceDatabase: the latest stored version is in effect.
	PolicySourceDatabase = "database"
)

// ActivePolicy is the policy a server places with (httpapi.Policy is its
// document).
type ActivePolicy struct {
	Rules policy.Rules
	// Document is Rules in the policy file's shape, as JSON.
	Document json.RawMessage
	// Version is 0 while the config file's policy is in effect.
	Version int64
	// Source is PolicySourceConfig or PolicySourceDatabase.
	Source string
	// SetBy, SetAt and Comment are the stored version's.
	SetBy   string
	SetAt   *time.Time
	Comment string
}

// PolicyWatch holds the policy in effect: the latest version stored in
// PostgreSQL, or Config while there is none. Every Interval it reads the
// version number in effect (one index lookup) and loads the document only
// when the number moved, so a version set through any server is in effect
// on every server within Interval, and placing a job reads the rules from
// memory with no round trip.
type PolicyWatch struct {
	Store PolicyStore
	// Config is the policy of the config file.
	Config policy.Rules
	// Interval is how often the version number is read. Default 2s.
	Interval time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger

	mu      sync.Mutex // serialises loads
	current atomic.Pointer[ActivePolicy]
}

// DefaultPolicyInterval is how often servers look for a new policy version.
const DefaultPolicyInterval = 2 * time.Second

// Rules implements RulesSource: the rules in effect, Config before the
// first Refresh.
func (w *PolicyWatch) Rules() policy.Rules {
	if p := w.current.Load(); p != nil {
		return p.Rules
	}
	return w.Config
}

// Current is the policy in effect as of the last Refresh.
func (w *PolicyWatch) Current() *ActivePolicy {
	if p := w.current.Load(); p != nil {
		return p
	}
	p, err := w.configPolicy()
	if err != nil {
		return &ActivePolicy{Rules: w.Config, Document: json.RawMessage("{}"), Source: PolicySourceConfig}
	}
	return p
}

func (w *PolicyWatch) configPolicy() (*ActivePolicy, error) {
	doc, err := RulesDocument(w.Config)
	if err != nil {
		return nil, err
	}
	return &ActivePolicy{Rules: w.Config, Document: doc, Source: PolicySourceConfig}, nil
}

// Refresh reads the version number in effect and, when it moved, loads and
// parses that version. A stored document this server cannot read is an
// error, and the policy in effect stays as it was.
func (w *PolicyWatch) Refresh(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.Store.PolicyVersionNumber(ctx)
	if err != nil {
		return err
	}
	cur := w.current.Load()
	if cur != nil && cur.Version == n {
		return nil
	}
	if n == 0 {
		p, err := w.configPolicy()
		if err != nil {
			return err
		}
		w.current.Store(p)
		return nil
	}
	v, err := w.Store.PolicyVersion(ctx)
	if err != nil {
		return err
	}
	rules, err := ParseRules(v.Rules, "json")
	if err != nil {
		return fmt.Errorf("policy version %d: %w", v.Version, err)
	}
	at := v.SetAt
	w.current.Store(&ActivePolicy{Rules: rules, Document: v.Rules, Version: v.Version, Source: PolicySourceDatabase,
		SetBy: v.SetBy, SetAt: &at, Comment: v.Comment})
	return nil
}

// Run refreshes every Interval until ctx ends, logging what fails (the
// policy in effect stays as it was).
func (w *PolicyWatch) Run(ctx context.Context) {
	every := w.Interval
	if every <= 0 {
		every = DefaultPolicyInterval
	}
	logger := w.Logger
	if logger == nil {
		logger = slog.Default()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		before := w.Current().Version
		if err := w.Refresh(ctx); err != nil && !errors.Is(err, context.Canceled) {
			logger.Error("reading the placement policy; the previous one stays in effect", "version", before, "err", err)
		} else if after := w.Current().Version; after != before {
			logger.Info("placement policy changed", "version", after)
		}
	}
}

// SetPolicy validates a policy document, records it as the next version
// and puts it in effect here at once (other servers follow within their
// Interval). With expected set, the version in effect must be *expected
// or queue.ErrPolicyChanged is returned. A document that does not parse
// changes nothing; its error names the key at fault.
func (w *PolicyWatch) SetPolicy(ctx context.Context, data []byte, format, setBy, comment string, expected *int64) (*ActivePolicy, error) {
	if len(data) > MaxPolicyBytes {
		return nil, &PolicyError{Err: fmt.Errorf("over the %d-byte limit", MaxPolicyBytes)}
	}
	if len(comment) > queue.MaxPolicyComment {
		return nil, &PolicyError{Field: "comment", Err: fmt.Errorf("at most %d bytes, got %d", queue.MaxPolicyComment, len(comment))}
	}
	rules, err := ParseRules(data, format)
	if err != nil {
		return nil, &PolicyError{Err: err}
	}
	doc, err := yamlJSON(data)
	if err != nil {
		return nil, &PolicyError{Err: err}
	}
	return w.setRules(ctx, rules, doc, setBy, comment, expected)
}

// SetRules records rules as the next version, as SetPolicy does.
func (w *PolicyWatch) SetRules(ctx context.Context, rules policy.Rules, setBy, comment string, expected *int64) (*ActivePolicy, error) {
	if err := rules.Validate(); err != nil {
		return nil, &PolicyError{Err: err}
	}
	doc, err := RulesDocument(rules)
	if err != nil {
		return nil, err
	}
	return w.setRules(ctx, rules, doc, setBy, comment, expected)
}

// SetProjectBudgets records the next version: the policy in effect with
// the budgets naming exactly project replaced by mine (where the first of
// them was, or at the end); budgets over globs and the rest of the policy
// stay. With expected, only while that version is in effect; without, on
// the version in effect now, so that a change recorded meanwhile is never
// overwritten (ErrPolicyChanged either way).
func (w *PolicyWatch) SetProjectBudgets(ctx context.Context, project string, mine []policy.Budget, setBy, comment string, expected *int64) (*ActivePolicy, error) {
	cur := w.Current()
	if expected != nil && *expected != cur.Version {
		return nil, queue.ErrPolicyChanged
	}
	rules := cur.Rules
	rules.Budgets = replaceBudgets(rules.Budgets, project, mine)
	if expected == nil {
		expected = &cur.Version
	}
	return w.SetRules(ctx, rules, setBy, comment, expected)
}

// replaceBudgets is budgets with the entries naming exactly project
// replaced by mine, where the first of them was (or at the end).
func replaceBudgets(budgets []policy.Budget, project string, mine []policy.Budget) []policy.Budget {
	at := -1
	var out []policy.Budget
	for _, b := range budgets {
		if b.Project == project {
			if at < 0 {
				at = len(out)
			}
			continue
		}
		out = append(out, b)
	}
	if at < 0 {
		at = len(out)
	}
	return slices.Insert(out, at, mine...)
}

func (w *PolicyWatch) setRules(ctx context.Context, rules policy.Rules, doc json.RawMessage, setBy, comment string, expected *int64) (*ActivePolicy, error) {
	if p := queue.TextProblem(comment); p != "" {
		return nil, &PolicyError{Field: "comment", Err: errors.New(p)}
	}
	v, err := w.Store.SetPolicy(ctx, doc, setBy, comment, expected)
	if err != nil {
		return nil, err
	}
	at := v.SetAt
	p := &ActivePolicy{Rules: rules, Document: v.Rules, Version: v.Version, Source: PolicySourceDatabase,
		SetBy: v.SetBy, SetAt: &at, Comment: v.Comment}
	w.mu.Lock()
	if cur := w.current.Load(); cur == nil || cur.Version < p.Version {
		w.current.Store(p)
	}
	w.mu.Unlock()
	return p, nil
}

// PolicyError is a policy document that cannot be applied; Err names the
// key at fault (`rules[2].residency: …`), Field the request field when it
// is not the document.
type PolicyError struct {
	Field string
	Err   error
}

func (e *PolicyError) Error() string {
	if e.Field != "" {
		return e.Field + ": " + e.Err.Error()
	}
	return e.Err.Error()
}

func (e *PolicyError) Unwrap() error { return e.Err }
