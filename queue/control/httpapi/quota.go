package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/gpuq/gpuq/queue"
)

// QuotaStore keeps the stored-bytes quotas admins set per project.
type QuotaStore interface {
	ProjectQuota(ctx context.Context, project string) (*queue.ProjectQuota, error)
	SetProjectQuota(ctx context.Context, project string, bytes int64, setBy string) error
	ClearProjectQuota(ctx context.Context, project string) error
}

type setQuotaInput struct {
	Project string `path:"project" maxLength:"63" pattern:"^[a-z0-9][a-z0-9_-]{0,62}$" patternDescription:"a project name: 1–63 lower-case letters, digits, - or _, starting with a letter or digit"`
	Body    struct {
		QuotaBytes int64 `json:"quota_bytes" minimum:"0" doc:"stored bytes the project may keep in checkpoints and results; 0: no quota"`
	}
}

// quotaAdmin is the refusal of a quota change to a token that does not
// cover every project: a project's own admin could otherwise lift it.
const quotaAdmin = "a project's storage quota is set by an admin token for all projects (gpuq token create --project '*' --role admin)"

func (s *Server) registerQuota(api huma.API) {
	admin := map[string]any{metaRole: queue.RoleAdmin}
	register(api, huma.Operation{
		OperationID: "get-project-quota", Errors: []int{404, 422}, Method: http.MethodGet, Path: "/v1/projects/{project}/quota", Tags: []string{"policy"},
		Summary:  "A project's stored-bytes quota in effect and what it stores now (admin of the project)",
		Metadata: admin,
	}, s.getQuota)
	register(api, huma.Operation{
		OperationID: "set-project-quota", Errors: []int{403, 404, 422}, Method: http.MethodPut, Path: "/v1/projects/{project}/quota", Tags: []string{"policy"},
		Summary:     "Set a project's stored-bytes quota in place of the config file's (admin of all projects)",
		Description: "In effect at once on every server: each checkpoint and result is checked against it in the transaction that records it. 0 is no quota. What the project stores already is kept; a checkpoint that would pass the quota is refused.",
		Metadata:    admin,
	}, s.setQuota)
	register(api, huma.Operation{
		OperationID: "clear-project-quota", Errors: []int{403, 404, 422}, Method: http.MethodDelete, Path: "/v1/projects/{project}/quota", Tags: []string{"policy"},
		Summary:  "Remove the quota an admin set, so that the config file's holds again (admin of all projects)",
		Metadata: admin,
	}, s.clearQuota)
}

func (s *Server) getQuota(ctx context.Context, in *projectInput) (*struct{ Body *queue.ProjectQuota }, error) {
	if !tokenOf(ctx).Sees(in.Project) {
		return nil, huma.Error404NotFound("project " + in.Project + " not found")
	}
	q, err := s.cfg.Store.ProjectQuota(ctx, in.Project)
	if err != nil {
		return nil, internal(s.cfg.Logger, "reading a quota", err)
	}
	return &struct{ Body *queue.ProjectQuota }{Body: q}, nil
}

func (s *Server) setQuota(ctx context.Context, in *setQuotaInput) (*struct{ Body *queue.ProjectQuota }, error) {
	tok := tokenOf(ctx)
	if !tok.CoversAll() {
		return nil, huma.Error403Forbidden(quotaAdmin)
	}
	if err := s.cfg.Store.SetProjectQuota(ctx, in.Project, in.Body.QuotaBytes, tok.ID.String()); err != nil {
		return nil, internal(s.cfg.Logger, "setting a quota", err)
	}
	return s.getQuota(ctx, &projectInput{Project: in.Project})
}

func (s *Server) clearQuota(ctx context.Context, in *projectInput) (*struct{ Body *queue.ProjectQuota }, error) {
	if !tokenOf(ctx).CoversAll() {
		return nil, huma.Error403Forbidden(quotaAdmin)
	}
	err := s.cfg.Store.ClearProjectQuota(ctx, in.Project)
	if errors.Is(err, queue.ErrNotFound) {
		return nil, huma.Error404NotFound("project " + in.Project + " has no quota set through the API")
	}
	if err != nil {
		return nil, internal(s.cfg.Logger, "clearing a quota", err)
	}
	return s.getQuota(ctx, in)
}
