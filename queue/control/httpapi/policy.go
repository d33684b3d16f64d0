package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

// Policy is the placement policy in effect.
type Policy struct {
	// Rules is the policy document, in the shape of a policy file.
	Rules map[string]any `json:"rules" doc:"the policy document, with the keys of a policy file (README \"Policy file\")"`
	// Version is 0 while no version was set and the servers' config file
	// policy is in effect.
	Version int64      `json:"version" doc:"0 while the config file's policy is in effect"`
	Source  string     `json:"source" enum:"config,database" doc:"config: no version was set, the servers' config file is in effect"`
	SetBy   string     `json:"set_by,omitempty" doc:"id of the token that set this version, or cli"`
	SetAt   *time.Time `json:"set_at,omitempty"`
	Comment string     `json:"comment,omitempty"`
}

// PolicyVersion is one version of the policy's history.
type PolicyVersion struct {
	Version int64          `json:"version"`
	Rules   map[string]any `json:"rules" doc:"the policy document of this version"`
	SetBy   string         `json:"set_by" doc:"id of the token that set this version, or cli"`
	// SetByName is the name of that token, while it is stored.
	SetByName string    `json:"set_by_name,omitempty" doc:"the name of the token that set this version"`
	SetAt     time.Time `json:"set_at"`
	Comment   string    `json:"comment,omitempty"`
}

// BudgetEntry is one budget of a project: what it may spend in a period.
type BudgetEntry struct {
	Cap    string `json:"cap" maxLength:"64" doc:"the most the project may spend in each period, such as \"500 EUR\""`
	Period string `json:"period" enum:"day,week,month,quarter,year,total"`
}

// BudgetUsage is one budget that applies to a project with what the
// project has used of it in the current period, in the base currency.
type BudgetUsage = control.BudgetUsage

// ProjectBudgets are a project's budgets in the policy in effect.
type ProjectBudgets struct {
	Project string `json:"project"`
	Version int64  `json:"version" doc:"the policy version they are part of"`
	Source  string `json:"source" enum:"config,database"`
	// Budgets are the entries naming exactly this project: the ones this
	// endpoint replaces.
	Budgets []BudgetEntry `json:"budgets" doc:"the budget entries naming exactly this project, which PUT replaces"`
	// Usage lists every budget that applies, globs included.
	Usage []BudgetUsage `json:"usage" doc:"every budget that applies to the project (globs included), with the project's use in the current period"`
}

type policyOutput struct {
	ETag string `header:"ETag" doc:"the version, for If-Match"`
	Body *Policy
}

type setPolicyInput struct {
	IfMatch string `header:"If-Match" doc:"the version this change is made on, as GET's ETag (\"3\"; \"0\" while the config file's policy is in effect); 412 when another is in effect"`
	Comment string `query:"comment" maxLength:"1000" doc:"why the policy changes, kept with the version"`
	RawBody []byte `contentType:"application/yaml"`
}

type policyVersionsInput struct {
	Limit int `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"most versions to list, newest first"`
}

type projectInput struct {
	Project string `path:"project" maxLength:"63" pattern:"^[a-z0-9][a-z0-9_-]{0,62}$" patternDescription:"a project name: 1–63 lower-case letters, digits, - or _, starting with a letter or digit"`
}

type projectBudgetsOutput struct {
	ETag string `header:"ETag" doc:"the policy version, for If-Match"`
	Body *ProjectBudgets
}

type setBudgetsInput struct {
	Project string `path:"project" maxLength:"63" pattern:"^[a-z0-9][a-z0-9_-]{0,62}$" patternDescription:"a project name: 1–63 lower-case letters, digits, - or _, starting with a letter or digit"`
	IfMatch string `header:"If-Match" doc:"the policy version this change is made on, as GET's ETag; 412 when another is in effect"`
	Comment string `query:"comment" maxLength:"1000" doc:"why the budgets change, kept with the version"`
	Body    struct {
		Budgets []BudgetEntry `json:"budgets" maxItems:"100" doc:"the project's budgets; empty removes them"`
	}
}

// globalAdmin is the refusal of a policy operation to a token that does
// not cover every project.
const globalAdmin = "the global policy needs an admin token for all projects (gpuq token create --project '*' --role admin); " +
	"a project's admin manages its budgets under /v1/projects/{project}/budgets"

func (s *Server) registerPolicy(api huma.API) {
	admin := map[string]any{metaRole: queue.RoleAdmin}
	register(api, huma.Operation{
		OperationID: "get-policy", Method: http.MethodGet, Path: "/v1/policy", Tags: []string{"policy"},
		Summary:     "The placement policy in effect on every server (admin of all projects)",
		Description: "The latest version set through the API or `gpuq policy set`; while none was set, the servers' config file policy (source config, version 0).",
		Metadata:    admin,
	}, s.getPolicy)
	register(api, huma.Operation{
		OperationID: "set-policy", Errors: []int{409, 412, 413, 422}, Method: http.MethodPut, Path: "/v1/policy", Tags: []string{"policy"},
		Summary: "Replace the placement policy with a new version (admin of all projects)",
		Description: "The body is a policy document (README \"Policy file\"), JSON or YAML, read as strictly as a policy file: " +
			"422 names the key at fault and nothing changes. Every server places with the new version within a few seconds. " +
			"With If-Match, 412 when another version is in effect; 409 when another change was recorded at the same moment.",
		MaxBodyBytes: control.MaxPolicyBytes,
		RequestBody: &huma.RequestBody{Required: true, Content: map[string]*huma.MediaType{
			"application/json": {Schema: &huma.Schema{Type: "object", Description: "a policy document"}},
			"application/yaml": {Schema: &huma.Schema{Type: "string", Description: "a policy document as YAML"}},
		}},
		SkipValidateBody: true,
		Metadata:         admin,
	}, s.setPolicy)
	register(api, huma.Operation{
		OperationID: "list-policy-versions", Errors: []int{422}, Method: http.MethodGet, Path: "/v1/policy/versions", Tags: []string{"policy"},
		Summary:  "The policy's versions, newest first (admin of all projects)",
		Metadata: admin,
	}, s.policyVersions)
	register(api, huma.Operation{
		OperationID: "get-project-budgets", Errors: []int{404, 422}, Method: http.MethodGet, Path: "/v1/projects/{project}/budgets", Tags: []string{"policy"},
		Summary:  "A project's budgets in the policy in effect, with its use of each in the current period (admin)",
		Metadata: admin,
	}, s.getBudgets)
	register(api, huma.Operation{
		OperationID: "set-project-budgets", Errors: []int{404, 409, 412, 422}, Method: http.MethodPut, Path: "/v1/projects/{project}/budgets", Tags: []string{"policy"},
		Summary: "Replace a project's budgets: a new policy version (admin of the project)",
		Description: "Replaces the budget entries naming exactly this project; budgets over globs, and everything else in the policy, stay. " +
			"If-Match, 409 and 412 as for PUT /v1/policy.",
		Metadata: admin,
	}, s.setBudgets)
}

func (s *Server) getPolicy(ctx context.Context, _ *struct{}) (*policyOutput, error) {
	if !tokenOf(ctx).CoversAll() {
		return nil, huma.Error403Forbidden(globalAdmin)
	}
	return s.policyAnswer(s.policy.Current())
}

func (s *Server) setPolicy(ctx context.Context, in *setPolicyInput) (*policyOutput, error) {
	tok := tokenOf(ctx)
	if !tok.CoversAll() {
		return nil, huma.Error403Forbidden(globalAdmin)
	}
	expected, err := ifMatch(in.IfMatch)
	if err != nil {
		return nil, err
	}
	if p := queue.TextProblem(in.Comment); p != "" {
		return nil, fieldProblem("query.comment", "%s", p)
	}
	p, err := s.policy.SetPolicy(ctx, in.RawBody, "yaml", tok.ID.String(), in.Comment, expected)
	if err != nil {
		return nil, s.policyError(err, expected != nil)
	}
	return s.policyAnswer(p)
}

func (s *Server) policyVersions(ctx context.Context, in *policyVersionsInput) (*struct{ Body []PolicyVersion }, error) {
	if !tokenOf(ctx).CoversAll() {
		return nil, huma.Error403Forbidden(globalAdmin)
	}
	list, err := s.cfg.Store.PolicyVersions(ctx, in.Limit)
	if err != nil {
		return nil, internal(s.cfg.Logger, "listing policy versions", err)
	}
	out := make([]PolicyVersion, len(list))
	for i, v := range list {
		if out[i], err = PolicyVersionOf(v); err != nil {
			return nil, internal(s.cfg.Logger, "reading policy versions", err)
		}
	}
	return &struct{ Body []PolicyVersion }{Body: out}, nil
}

func (s *Server) getBudgets(ctx context.Context, in *projectInput) (*projectBudgetsOutput, error) {
	if !tokenOf(ctx).Sees(in.Project) {
		return nil, huma.Error404NotFound("project " + in.Project + " not found")
	}
	return s.budgetsAnswer(ctx, in.Project, s.policy.Current())
}

func (s *Server) setBudgets(ctx context.Context, in *setBudgetsInput) (*projectBudgetsOutput, error) {
	tok := tokenOf(ctx)
	if !tok.Sees(in.Project) {
		return nil, huma.Error404NotFound("project " + in.Project + " not found")
	}
	expected, err := ifMatch(in.IfMatch)
	if err != nil {
		return nil, err
	}
	if p := queue.TextProblem(in.Comment); p != "" {
		return nil, fieldProblem("query.comment", "%s", p)
	}
	cur := s.policy.Current()
	conv, err := cur.Rules.Converter()
	if err != nil {
		return nil, internal(s.cfg.Logger, "reading the policy", err)
	}
	var mine []policy.Budget
	for i, b := range in.Body.Budgets {
		field := "body.budgets[" + strconv.Itoa(i) + "].cap"
		limit, err := policy.ParseMoney(b.Cap)
		if err != nil {
			return nil, fieldProblem(field, "%v", err)
		}
		if limit.Micros < 0 {
			return nil, fieldProblem(field, "must not be negative, got %s", limit)
		}
		if _, ok := conv.ToBase(limit); !ok {
			return nil, fieldProblem(field, "unknown currency %q: the policy's base currency is %s and exchange_rates has no rate for it", limit.Currency, conv.Base())
		}
		mine = append(mine, policy.Budget{Project: in.Project, Cap: limit, Period: b.Period})
	}
	if expected != nil && *expected != cur.Version {
		// The store checks again; this spares a document built on a
		// version that is already gone.
		return nil, huma.Error412PreconditionFailed("the policy in effect is version " + strconv.FormatInt(cur.Version, 10) + ", not " + in.IfMatch)
	}
	p, err := s.policy.SetProjectBudgets(ctx, in.Project, mine, tok.ID.String(), in.Comment, expected)
	if err != nil {
		return nil, s.policyError(err, expected != nil)
	}
	return s.budgetsAnswer(ctx, in.Project, p)
}

func (s *Server) budgetsAnswer(ctx context.Context, project string, p *control.ActivePolicy) (*projectBudgetsOutput, error) {
	out, err := ProjectBudgetsOf(ctx, s.cfg.Store, project, p)
	if err != nil {
		return nil, internal(s.cfg.Logger, "reading budgets", err)
	}
	return &projectBudgetsOutput{ETag: etag(p.Version), Body: out}, nil
}

// ProjectBudgetsOf is a project's budgets in policy p, with its use of
// every budget that applies to it in the current period.
func ProjectBudgetsOf(ctx context.Context, s control.LedgerStore, project string, p *control.ActivePolicy) (*ProjectBudgets, error) {
	out := &ProjectBudgets{Project: project, Version: p.Version, Source: p.Source, Budgets: []BudgetEntry{}}
	for _, b := range p.Rules.Budgets {
		if b.Project == project {
			out.Budgets = append(out.Budgets, BudgetEntry{Cap: b.Cap.String(), Period: b.Period})
		}
	}
	var err error
	if out.Usage, err = control.BudgetUsages(ctx, s, project, p.Rules, time.Now()); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Server) policyAnswer(p *control.ActivePolicy) (*policyOutput, error) {
	out, err := PolicyOf(p)
	if err != nil {
		return nil, internal(s.cfg.Logger, "writing the policy", err)
	}
	return &policyOutput{ETag: etag(p.Version), Body: out}, nil
}

// PolicyOf is the API's document of a policy in effect.
func PolicyOf(p *control.ActivePolicy) (*Policy, error) {
	out := &Policy{Version: p.Version, Source: p.Source, SetBy: p.SetBy, SetAt: p.SetAt, Comment: p.Comment}
	if err := json.Unmarshal(p.Document, &out.Rules); err != nil {
		return nil, fmt.Errorf("policy version %d: %w", p.Version, err)
	}
	if out.Rules == nil {
		out.Rules = map[string]any{}
	}
	return out, nil
}

// PolicyVersionOf is the API's document of a stored version.
func PolicyVersionOf(v *queue.PolicyVersion) (PolicyVersion, error) {
	out := PolicyVersion{Version: v.Version, SetBy: v.SetBy, SetByName: v.SetByName, SetAt: v.SetAt, Comment: v.Comment}
	if err := json.Unmarshal(v.Rules, &out.Rules); err != nil {
		return out, fmt.Errorf("policy version %d: %w", v.Version, err)
	}
	return out, nil
}

func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// ifMatch reads an If-Match header: nil when absent or "*", else the
// version it names.
func ifMatch(h string) (*int64, error) {
	h = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(h), "W/"))
	if h == "" || h == "*" {
		return nil, nil
	}
	v, err := strconv.ParseInt(strings.Trim(h, `"`), 10, 64)
	if err != nil || v < 0 {
		return nil, fieldProblem("header.If-Match", "want a policy version as the ETag gives it, such as \"3\"; got %q", h)
	}
	return &v, nil
}

// policyError answers a policy change that failed: a change made on a
// version no longer in effect is 412 when the caller named it (If-Match),
// 409 when another change was recorded meanwhile.
func (s *Server) policyError(err error, conditional bool) error {
	var pe *control.PolicyError
	switch {
	case errors.As(err, &pe):
		if pe.Field != "" {
			return fieldProblem(pe.Field, "%v", pe.Err)
		}
		return documentProblem(pe.Err)
	case errors.Is(err, queue.ErrPolicyChanged) && !conditional:
		return huma.Error409Conflict("another policy change was recorded at the same moment; read the policy again (GET) and retry")
	case errors.Is(err, queue.ErrPolicyChanged):
		return huma.Error412PreconditionFailed("the policy in effect changed meanwhile; read it again (GET) and retry with its ETag in If-Match")
	}
	return internal(s.cfg.Logger, "setting the policy", err)
}

// documentProblem is the 422 for a policy document that cannot be applied:
// one detail per problem, located at its key in the body
// (body.rules[0].residency).
func documentProblem(err error) error {
	var details []*huma.ErrorDetail
	for _, msg := range strings.Split(err.Error(), "; ") {
		key, rest, ok := strings.Cut(msg, ": ")
		switch {
		case len(details) > 0 && (!ok || key == "allowed" || strings.ContainsAny(key, " \t\"")):
			// The rest of the previous problem: "…; allowed: a, b",
			// "…; known classes: EU, …".
			details[len(details)-1].Message += "; " + msg
		case !ok || strings.ContainsAny(key, " \t\""):
			details = append(details, &huma.ErrorDetail{Location: "body", Message: msg})
		default:
			details = append(details, &huma.ErrorDetail{Location: "body." + key, Message: rest})
		}
	}
	errs := make([]error, len(details))
	for i, d := range details {
		errs[i] = d
	}
	return huma.Error422UnprocessableEntity("invalid policy: "+err.Error(), errs...)
}
