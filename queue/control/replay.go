package control

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
)

// Recipe is what a decision was made from besides its offers: the job's
// requirements after the spot strategy's advice, the rules with their
// budgets charged, the decision time and, for a re-placement, the previous
// decision as stored and the job's history. Placement is a pure function
// of these and the offers, so a recipe stored with its offer snapshot
// recomputes the full decision, every rejected offer with its reasons,
// that the stored compact decision summarises.
type Recipe struct {
	Job   policy.Requirements `json:"job"`
	Rules policy.Rules        `json:"rules"`
	Now   time.Time           `json:"now"`
	// Previous is the previous placement's stored decision; empty on a
	// first placement.
	Previous json.RawMessage `json:"previous,omitempty"`
	History  *policy.History `json:"history,omitempty"`
	// Notes are the decision's notes that placement itself does not write
	// (the spot strategy's advice).
	Notes []string `json:"notes,omitempty"`
}

// place decides over set as the recipe says.
func (r Recipe) place(set *policy.OfferSet) (policy.Decision, error) {
	var d policy.Decision
	var err error
	if len(r.Previous) == 0 {
		d, err = set.Place(r.Job, r.Rules, r.Now)
	} else {
		var previous policy.Decision
		if err := json.Unmarshal(r.Previous, &previous); err != nil {
			return policy.Decision{}, fmt.Errorf("reading the previous decision: %w", err)
		}
		var history policy.History
		if r.History != nil {
			history = *r.History
		}
		d, err = set.Replace(r.Job, r.Rules, previous, history, r.Now)
	}
	if err == nil {
		// Recipes stored before they kept only the strategy's advice
		// hold every note of their decision: placement's own are not
		// repeated.
		for _, n := range r.Notes {
			if !slices.Contains(d.Notes, n) {
				d.Notes = append(d.Notes, n)
			}
		}
	}
	return d, err
}

// Replay recomputes a stored placement's full decision from its replay
// record. It fails when the record is malformed; a decision that no longer
// places (it always should: the inputs are the same) is returned with its
// error, as Decide returns it.
func Replay(rec *queue.DecisionReplay) (policy.Decision, error) {
	var r Recipe
	if err := json.Unmarshal(rec.Recipe, &r); err != nil {
		return policy.Decision{}, fmt.Errorf("reading the placement's recipe: %w", err)
	}
	var offers []policy.Offer
	if err := json.Unmarshal(rec.Offers, &offers); err != nil {
		return policy.Decision{}, fmt.Errorf("reading the placement's offer snapshot %s: %w", rec.SnapshotID, err)
	}
	return r.place(policy.NewOfferSet(offers))
}

// snapshot is an offer set's JSON and its hash, computed once per set: a
// placer stores it with the first placement it makes from the set.
type snapshot struct {
	once sync.Once
	id   string
	body []byte
	err  error
}

// Snapshot returns the offers' JSON and its id (the hex SHA-256 of it).
func (o *Offers) Snapshot() (string, []byte, error) {
	s := o.snapshot
	if s == nil {
		s = &snapshot{}
		o.snapshot = s
	}
	s.once.Do(func() {
		s.body, s.err = json.Marshal(o.List)
		sum := sha256.Sum256(s.body)
		s.id = hex.EncodeToString(sum[:])
	})
	return s.id, s.body, s.err
}

// DecisionAlternatives and DecisionExamples size the compact decision a
// placement stores: the first alternatives of plan B and a few rejected
// offers per reason.
const (
	DecisionAlternatives = 10
	DecisionExamples     = 3
)

// DecisionReplays reads what a placement was decided from.
type DecisionReplays interface {
	LatestPlacement(ctx context.Context, id uuid.UUID) (*queue.Placement, error)
	DecisionReplay(ctx context.Context, id uuid.UUID, version int) (*queue.DecisionReplay, error)
}

// ErrNoReplay is returned by Explain when a placement's inputs are not
// kept (placed before they were recorded, or pruned past retention).
var ErrNoReplay = errors.New("what this placement was decided from is no longer kept; its stored decision has the chosen offer, plan B and the rejections counted by reason")

// Explain returns the full decision of a job's current placement, every
// rejected offer with its reasons, recomputed from the offers and the
// recipe it was decided from. queue.ErrNotFound when the job has not been
// placed; ErrNoReplay when the inputs are no longer kept.
func Explain(ctx context.Context, store DecisionReplays, id uuid.UUID) (*policy.Decision, error) {
	p, err := store.LatestPlacement(ctx, id)
	if err != nil {
		return nil, err
	}
	rec, err := store.DecisionReplay(ctx, id, p.Version)
	if errors.Is(err, queue.ErrNotFound) {
		return nil, ErrNoReplay
	}
	if err != nil {
		return nil, err
	}
	d, err := Replay(rec)
	var none *policy.NoPlacementError
	if err != nil && !errors.As(err, &none) {
		return nil, err
	}
	return &d, nil
}
