package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

// Spend is a project's budget ledger since a time: what its jobs accrued
// and still reserve per currency, and estimated against accrued per
// provider and region and per job (`gpuq spend --project P -o json`).
type Spend = control.Ledger

// NewToken asks for a token.
type NewToken struct {
	Name     string     `json:"name,omitempty" maxLength:"200"`
	Projects []string   `json:"projects" minItems:"1" maxItems:"100"`
	Role     queue.Role `json:"role" enum:"read,submit,admin"`
	// ExpiresAt is when the token stops working; never when absent.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// CreatedToken is a new token with its secret, shown this once.
type CreatedToken struct {
	Token  string       `json:"token"`
	Record *queue.Token `json:"record"`
}

// Health is the health check's answer.
type Health struct {
	Status string `json:"status"`
}

type spendInput struct {
	Project string `path:"project" maxLength:"63" pattern:"^[a-z0-9][a-z0-9_-]{0,62}$" patternDescription:"a project name: 1–63 lower-case letters, digits, - or _, starting with a letter or digit"`
	Since   string `query:"since" doc:"start of the period (RFC 3339); default: the start of the current month (UTC)"`
}

type nodesInput struct {
	Pool string `query:"pool" maxLength:"64" doc:"only nodes of this pool"`
}

type workersInput struct {
	Pool string `query:"pool" maxLength:"64" doc:"only workers of this pool"`
}

type instancesInput struct {
	Pool  string `query:"pool" maxLength:"64" doc:"only instances of this pool"`
	State string `query:"state" enum:"requested,pending,ready,draining,terminated,preempted,failed" doc:"only instances in this state"`
}

type tokenIDInput struct {
	ID uuid.UUID `path:"id" doc:"token id"`
}

func (s *Server) registerAdmin(api huma.API) {
	register(api, huma.Operation{
		OperationID: "get-project-spend", Errors: []int{404, 422}, Method: http.MethodGet, Path: "/v1/projects/{project}/spend", Tags: []string{"projects"},
		Summary:  "A project's budget ledger: accrued and reserved per currency, estimated against accrued per provider and region and per job",
		Metadata: map[string]any{metaRole: queue.RoleRead},
	}, s.spend)
	register(api, huma.Operation{
		OperationID: "list-nodes", Method: http.MethodGet, Path: "/v1/nodes", Tags: []string{"admin"},
		Summary:  "List worker nodes with their canary record (admin)",
		Metadata: map[string]any{metaRole: queue.RoleAdmin},
	}, s.nodes)
	register(api, huma.Operation{
		OperationID: "list-workers", Method: http.MethodGet, Path: "/v1/workers", Tags: []string{"admin"},
		Summary:  "List the live workers the server's liveness monitor hears: when each last beat, the attempts it holds, and whether it takes no work after host errors (admin)",
		Metadata: map[string]any{metaRole: queue.RoleAdmin},
	}, s.workers)
	register(api, huma.Operation{
		OperationID: "list-instances", Method: http.MethodGet, Path: "/v1/instances", Tags: []string{"admin"},
		Summary:  "List the machines the autoscaler rented, as gpuq instances -o json does (admin)",
		Metadata: map[string]any{metaRole: queue.RoleAdmin},
	}, s.instances)
	register(api, huma.Operation{
		OperationID: "create-token", Errors: []int{422}, Method: http.MethodPost, Path: "/v1/tokens", Tags: []string{"admin"},
		Summary:       "Create a token for some of this token's projects (admin); its secret is shown once",
		DefaultStatus: http.StatusCreated,
		Metadata:      map[string]any{metaRole: queue.RoleAdmin},
	}, s.createToken)
	register(api, huma.Operation{
		OperationID: "list-tokens", Errors: []int{404, 422}, Method: http.MethodGet, Path: "/v1/tokens", Tags: []string{"admin"},
		Summary:  "List the tokens of this token's projects, without secrets (admin)",
		Metadata: map[string]any{metaRole: queue.RoleAdmin},
	}, s.listTokens)
	register(api, huma.Operation{
		OperationID: "revoke-token", Errors: []int{404, 422}, Method: http.MethodDelete, Path: "/v1/tokens/{id}", Tags: []string{"admin"},
		Summary:       "Revoke a token whose projects are all this token's (admin)",
		DefaultStatus: http.StatusNoContent,
		Metadata:      map[string]any{metaRole: queue.RoleAdmin},
	}, s.revokeToken)
	register(api, huma.Operation{
		OperationID: "health", Method: http.MethodGet, Path: "/v1/healthz", Tags: []string{"meta"},
		Summary:  "Health check; needs no token",
		Security: []map[string][]string{{}},
	}, func(context.Context, *struct{}) (*struct{ Body Health }, error) {
		return &struct{ Body Health }{Body: Health{Status: "ok"}}, nil
	})
}

func (s *Server) spend(ctx context.Context, in *spendInput) (*struct{ Body *Spend }, error) {
	if !tokenOf(ctx).Sees(in.Project) {
		return nil, huma.Error404NotFound("project " + in.Project + " not found")
	}
	since, err := sinceOrMonthStart(in.Since, time.Now().UTC())
	if err != nil {
		return nil, err
	}
	out, err := control.ProjectLedger(ctx, s.cfg.Store, in.Project, since)
	if err != nil {
		return nil, internal(s.cfg.Logger, "reading spend", err)
	}
	if out.Budgets, err = control.BudgetUsages(ctx, s.cfg.Store, in.Project, s.policy.Current().Rules, time.Now()); err != nil {
		return nil, internal(s.cfg.Logger, "reading budgets", err)
	}
	return &struct{ Body *Spend }{Body: out}, nil
}

// sinceOrMonthStart reads a query's since (RFC 3339); without one, the
// start of now's month (UTC).
func sinceOrMonthStart(raw string, now time.Time) (time.Time, error) {
	if raw == "" {
		return time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC), nil
	}
	t, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return t, fieldProblem("query.since", "want an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", raw)
	}
	return t, nil
}

func (s *Server) instances(ctx context.Context, in *instancesInput) (*struct{ Body []*queue.Instance }, error) {
	list, err := s.cfg.Store.Instances(ctx, in.Pool, queue.InstanceState(in.State))
	if err != nil {
		return nil, internal(s.cfg.Logger, "listing instances", err)
	}
	if list == nil {
		list = []*queue.Instance{}
	}
	return &struct{ Body []*queue.Instance }{Body: list}, nil
}

func (s *Server) nodes(ctx context.Context, in *nodesInput) (*struct{ Body []*queue.Node }, error) {
	nodes, err := s.cfg.Store.Nodes(ctx, in.Pool)
	if err != nil {
		return nil, internal(s.cfg.Logger, "listing nodes", err)
	}
	if nodes == nil {
		nodes = []*queue.Node{}
	}
	return &struct{ Body []*queue.Node }{Body: nodes}, nil
}

func (s *Server) workers(_ context.Context, in *workersInput) (*struct{ Body []queue.LiveWorker }, error) {
	return &struct{ Body []queue.LiveWorker }{Body: s.cfg.Workers.List(in.Pool)}, nil
}

func (s *Server) createToken(ctx context.Context, in *struct{ Body NewToken }) (*struct{ Body *CreatedToken }, error) {
	tok := tokenOf(ctx)
	for i, p := range in.Body.Projects {
		if !tok.Sees(p) {
			return nil, huma.Error403Forbidden("this token may not create tokens for project "+p,
				&huma.ErrorDetail{Location: "body.projects[" + strconv.Itoa(i) + "]", Message: "not one of this token's projects", Value: p})
		}
	}
	secret, t, err := queue.NewTokenSecret(in.Body.Name, in.Body.Projects, in.Body.Role, in.Body.ExpiresAt)
	if err != nil {
		// "name: …": located at the body's field.
		if key, msg, ok := strings.Cut(err.Error(), ": "); ok && !strings.ContainsAny(key, " \"") {
			return nil, fieldProblem("body."+key, "%s", msg)
		}
		return nil, huma.Error422UnprocessableEntity(err.Error())
	}
	rec, err := s.cfg.Store.CreateToken(ctx, t)
	if err != nil {
		return nil, internal(s.cfg.Logger, "creating token", err)
	}
	return &struct{ Body *CreatedToken }{Body: &CreatedToken{Token: secret, Record: rec}}, nil
}

type listTokensInput struct {
	Project string `query:"project" maxLength:"63" pattern:"^([a-z0-9][a-z0-9_-]{0,62}|\\*)$" patternDescription:"a project name, or * for the tokens of every project" doc:"only tokens of this project"`
}

func (s *Server) listTokens(ctx context.Context, in *listTokensInput) (*struct{ Body []*queue.Token }, error) {
	projects := tokenOf(ctx).ProjectFilter()
	if in.Project != "" {
		if !tokenOf(ctx).Sees(in.Project) {
			return nil, huma.Error404NotFound("project " + in.Project + " not found")
		}
		projects = []string{in.Project}
	}
	list, err := s.cfg.Store.Tokens(ctx, projects)
	if err != nil {
		return nil, internal(s.cfg.Logger, "listing tokens", err)
	}
	return &struct{ Body []*queue.Token }{Body: list}, nil
}

func (s *Server) revokeToken(ctx context.Context, in *tokenIDInput) (*struct{}, error) {
	err := s.cfg.Store.RevokeToken(ctx, in.ID, tokenOf(ctx).ProjectFilter())
	if errors.Is(err, queue.ErrNotFound) {
		return nil, huma.Error404NotFound("token " + in.ID.String() + " not found")
	}
	if err != nil {
		return nil, internal(s.cfg.Logger, "revoking token", err)
	}
	return &struct{}{}, nil
}
