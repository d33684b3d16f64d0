package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

// PlacementView is where a job was placed and the decision's full
// explanation: chosen offer, ranked alternatives, every rejected offer with
// its reasons, the estimated cost.
type PlacementView struct {
	Version     int             `json:"version"`
	Pool        string          `json:"pool"`
	Region      string          `json:"region"`
	Residency   string          `json:"residency,omitempty"`
	Countries   []string        `json:"countries,omitempty"`
	PriceMicros int64           `json:"price_micros"`
	Currency    string          `json:"currency,omitempty"`
	Decision    json.RawMessage `json:"decision"`
}

// Plan is a dry-run placement decision for a spec.
type Plan struct {
	// Feasible is false when no offer satisfies the job; the decision then
	// lists every rejection.
	Feasible bool            `json:"feasible"`
	Reason   string          `json:"reason,omitempty"`
	Decision json.RawMessage `json:"decision"`
	// Counts and Relaxation, when no offer is feasible: the offers each
	// reason rejects, and the one constraint whose relaxing would make
	// the most offers feasible.
	Counts     []policy.ReasonCount `json:"counts,omitempty"`
	Relaxation *policy.Relaxation   `json:"relaxation,omitempty"`
}

// OfferList is what the providers offer now, each in its own currency,
// with the policy's base currency and exchange rates that placement
// compares prices with.
type OfferList struct {
	Offers        []policy.Offer     `json:"offers"`
	BaseCurrency  string             `json:"base_currency" doc:"the currency placement compares prices in"`
	ExchangeRates map[string]float64 `json:"exchange_rates" doc:"units of the base currency per unit of each other currency, as the policy states them"`
}

// moneyDoc is how policy.Money is written in JSON.
type moneyDoc struct {
	Micros   int64  `json:"micros"`
	Currency string `json:"currency"`
}

type checkpointsOutput struct {
	Body []queue.Checkpoint
}

type placementOutput struct {
	Body *PlacementView
}

type planOutput struct {
	Body *Plan
}

type offersOutput struct {
	Body *OfferList
}

func (s *Server) registerPlacement(api huma.API) {
	register(api, huma.Operation{
		OperationID: "list-job-checkpoints", Errors: []int{404, 422}, Method: http.MethodGet, Path: "/v1/jobs/{id}/checkpoints", Tags: []string{"jobs"},
		Summary:  "List a job's committed checkpoints in sequence order",
		Metadata: map[string]any{metaRole: queue.RoleRead},
	}, s.checkpoints)
	register(api, huma.Operation{
		OperationID: "get-job-placement", Errors: []int{404, 422}, Method: http.MethodGet, Path: "/v1/jobs/{id}/placement", Tags: []string{"placement"},
		Summary:     "Explain where a job was placed and why",
		Description: "404 when the job has not been placed (yet). The decision is the stored compact form; with explain=true it is recomputed in full (404 when what it was decided from is no longer kept).",
		Metadata:    map[string]any{metaRole: queue.RoleRead},
	}, s.placement)
	register(api, huma.Operation{
		OperationID: "plan-job", Errors: []int{413, 422}, Method: http.MethodPost, Path: "/v1/plan", Tags: []string{"placement"},
		Summary:      "Place a job spec without submitting it (dry run)",
		Description:  "The same decision the scheduler makes (and `gpuq plan` prints), with the project's budgets charged with its recorded spend.",
		MaxBodyBytes: queue.MaxSpecBytes + 1,
		RequestBody:  specBody(api),
		// queue.ParseSpec is the one judge of a spec.
		SkipValidateBody: true,
		Metadata:         map[string]any{metaRole: queue.RoleRead},
	}, s.plan)
	register(api, huma.Operation{
		OperationID: "list-offers", Method: http.MethodGet, Path: "/v1/offers", Tags: []string{"placement"},
		Summary:  "List what the providers offer now",
		Metadata: map[string]any{metaRole: queue.RoleRead},
	}, s.offers)
}

func (s *Server) checkpoints(ctx context.Context, in *jobInput) (*checkpointsOutput, error) {
	if _, err := s.ownJob(ctx, in.ID); err != nil {
		return nil, err
	}
	cps, err := s.cfg.Store.Checkpoints(ctx, in.ID)
	if err != nil {
		return nil, internal(s.cfg.Logger, "reading checkpoints", err)
	}
	if cps == nil {
		cps = []queue.Checkpoint{}
	}
	return &checkpointsOutput{Body: cps}, nil
}

// placementInput names a job and whether to explain its placement in full.
type placementInput struct {
	ID      uuid.UUID `path:"id" doc:"job id"`
	Explain bool      `query:"explain" doc:"recompute the full decision, every rejected offer with its reasons, from the offers and rules it was made with; without it the decision is the stored compact form (chosen offer, plan B, rejections counted by reason with a few examples)"`
}

func (s *Server) placement(ctx context.Context, in *placementInput) (*placementOutput, error) {
	if _, err := s.ownJob(ctx, in.ID); err != nil {
		return nil, err
	}
	p, err := s.cfg.Store.LatestPlacement(ctx, in.ID)
	if errors.Is(err, queue.ErrNotFound) {
		return nil, huma.Error404NotFound("job " + in.ID.String() + " has not been placed")
	}
	if err != nil {
		return nil, internal(s.cfg.Logger, "reading placement", err)
	}
	view := &PlacementView{Version: p.Version, Pool: p.Pool, Region: p.Region, Residency: p.Residency,
		Countries: p.Countries, PriceMicros: p.PriceMicros, Currency: p.Currency, Decision: p.Decision}
	if in.Explain {
		d, err := control.Explain(ctx, s.cfg.Store, in.ID)
		if errors.Is(err, control.ErrNoReplay) {
			return nil, huma.Error404NotFound("job " + in.ID.String() + ": " + err.Error())
		}
		if err != nil {
			return nil, internal(s.cfg.Logger, "explaining placement", err)
		}
		if view.Decision, err = json.Marshal(d); err != nil {
			return nil, internal(s.cfg.Logger, "writing the decision", err)
		}
	}
	return &placementOutput{Body: view}, nil
}

func (s *Server) plan(ctx context.Context, in *submitInput) (*planOutput, error) {
	tok := tokenOf(ctx)
	spec, err := queue.ParseSpec(in.RawBody)
	if err != nil {
		return nil, specProblem(err)
	}
	if !projectGiven(in.RawBody) && len(tok.Projects) == 1 && !tok.CoversAll() {
		spec.Project = tok.Projects[0]
	}
	if !tok.Sees(spec.Project) {
		return nil, huma.Error403Forbidden("this token may not plan for project "+spec.Project,
			&huma.ErrorDetail{Location: "spec.project", Message: "not one of this token's projects: " + strings.Join(tok.Projects, ", "), Value: spec.Project})
	}
	job, err := control.PolicyJob(spec)
	if err == nil {
		err = job.Validate()
	}
	if err != nil {
		return nil, policyProblem(err)
	}
	// The outputs it reads keep their residency: a plan says so.
	if err := control.InputData(ctx, s.cfg.Store, spec, &job); err != nil {
		var rejected *queue.RejectionError
		if errors.As(err, &rejected) {
			return nil, policyProblem(err)
		}
		return nil, internal(s.cfg.Logger, "reading the outputs a spec reads", err)
	}
	offers, err := control.CollectOffers(ctx, s.cfg.Sources)
	if err != nil {
		return nil, internal(s.cfg.Logger, "collecting offers", err)
	}
	now := time.Now().UTC()
	rules := s.policy.Rules()
	spend := map[time.Time]map[string]int64{}
	for _, since := range rules.BudgetPeriods(spec.Project, now) {
		if spend[since], err = s.cfg.Store.Spend(ctx, spec.Project, since); err != nil {
			return nil, internal(s.cfg.Logger, "reading spend", err)
		}
	}
	d, err := control.Decide(control.Question{Job: job, SubmittedAt: now, Rules: rules, Offers: offers, Now: now,
		Spend: func(since time.Time) map[string]int64 { return spend[since] }})
	plan := &Plan{Feasible: err == nil}
	var refusal *policy.NoPlacementError
	switch {
	case errors.As(err, &refusal):
		d, plan.Reason = refusal.Decision, refusal.Error()
		plan.Counts, plan.Relaxation = refusal.Counts, refusal.Relaxation
	case err != nil:
		return nil, policyProblem(err)
	}
	if plan.Decision, err = json.Marshal(d); err != nil {
		return nil, internal(s.cfg.Logger, "writing decision", err)
	}
	return &planOutput{Body: plan}, nil
}

func (s *Server) offers(ctx context.Context, _ *struct{}) (*offersOutput, error) {
	offers, err := control.CollectOffers(ctx, s.cfg.Sources)
	if err != nil {
		return nil, internal(s.cfg.Logger, "collecting offers", err)
	}
	list := offers.List
	if list == nil {
		list = []policy.Offer{}
	}
	rules := s.policy.Rules().WithDefaults()
	base := rules.BaseCurrency
	rates := map[string]float64{}
	for cur, r := range rules.ExchangeRates {
		rates[strings.ToUpper(cur)] = r
	}
	return &offersOutput{Body: &OfferList{Offers: list, BaseCurrency: base, ExchangeRates: rates}}, nil
}

// specKeys renames policy.Requirements's field names to the job spec's.
var specKeys = strings.NewReplacer(
	"job.gpu_count", "spec.resources.gpu.count", "job.min_gpu_memory_gb", "spec.resources.gpu.memory_gb",
	"job.vcpu", "spec.resources.cpu", "job.memory_gb", "spec.resources.memory_gb", "job.tier", "spec.placement.tier",
	"job.providers", "spec.placement.providers", "job.regions", "spec.placement.regions", "job.residency", "spec.placement.residency",
	"job.expected_duration", "spec.expected_duration", "job.inputs", "spec.inputs",
	"job.max_price_per_hour", "spec.budget.max_price_per_hour", "job.budget", "spec.budget.total",
)

// policyProblem is the 422 for requirements policy refuses, located at the
// spec field when the error names one.
func policyProblem(err error) error {
	msg := specKeys.Replace(err.Error())
	field, detail, ok := strings.Cut(msg, ": ")
	if !ok || !strings.HasPrefix(field, "spec.") || strings.ContainsAny(field, " ") {
		return huma.Error422UnprocessableEntity(msg)
	}
	return huma.Error422UnprocessableEntity(msg, &huma.ErrorDetail{Location: field, Message: detail})
}
