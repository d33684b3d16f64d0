package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/danielgtaylor/huma/v2"

	"github.com/gpuq/gpuq/queue"
)

// SecretStore keeps the secrets of projects. Values go in and never come
// out of it here: only the worker service reads them, for a worker running
// a job that names them.
type SecretStore interface {
	SetSecret(ctx context.Context, project, name, value, setBy string) (*queue.Secret, error)
	Secrets(ctx context.Context, project string) ([]queue.Secret, error)
	DeleteSecret(ctx context.Context, project, name string) error
}

// Secrets lists a project's secrets, without their values.
type Secrets struct {
	Project string         `json:"project"`
	Secrets []queue.Secret `json:"secrets"`
}

type secretInput struct {
	Project string `path:"project" maxLength:"63" pattern:"^[a-z0-9][a-z0-9_-]{0,62}$" patternDescription:"a project name: 1–63 lower-case letters, digits, - or _, starting with a letter or digit"`
	Name    string `path:"name" maxLength:"128" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" patternDescription:"an environment variable's name: a letter or _, then letters, digits or _" doc:"the environment variable a job naming it finds its value in; not GPUQ_*"`
}

type setSecretInput struct {
	Project string `path:"project" maxLength:"63" pattern:"^[a-z0-9][a-z0-9_-]{0,62}$" patternDescription:"a project name: 1–63 lower-case letters, digits, - or _, starting with a letter or digit"`
	Name    string `path:"name" maxLength:"128" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" patternDescription:"an environment variable's name: a letter or _, then letters, digits or _" doc:"the environment variable a job naming it finds its value in; not GPUQ_*"`
	Body    struct {
		// No length in the schema: a refused value is never echoed in
		// the problem, as the schema's checks would.
		Value string `json:"value" doc:"the value, 1 byte to 32 KiB of UTF-8 text without NUL; never shown again"`
	}
}

func (s *Server) registerSecrets(api huma.API) {
	register(api, huma.Operation{
		OperationID: "list-project-secrets", Errors: []int{404, 422}, Method: http.MethodGet, Path: "/v1/projects/{project}/secrets", Tags: []string{"jobs"},
		Summary:  "The names of a project's secrets, never their values (any token of the project)",
		Metadata: map[string]any{metaRole: queue.RoleRead},
	}, s.listSecrets)
	register(api, huma.Operation{
		OperationID: "set-project-secret", Errors: []int{403, 404, 409, 422}, Method: http.MethodPut, Path: "/v1/projects/{project}/secrets/{name}", Tags: []string{"jobs"},
		Summary: "Set a project's secret, or replace its value (admin of the project)",
		Description: "A job of the project whose spec names it in `secrets` finds its value in the environment variable of its name; the value is masked in the job's logs. " +
			"It is never returned: not here, not in a job, its status, events or logs. Only the worker running a job that names it receives it. " +
			"409 when the project holds 500 secrets and this name is new.",
		Metadata: map[string]any{metaRole: queue.RoleAdmin},
	}, s.setSecret)
	register(api, huma.Operation{
		OperationID: "delete-project-secret", Errors: []int{404, 422}, Method: http.MethodDelete, Path: "/v1/projects/{project}/secrets/{name}", Tags: []string{"jobs"},
		Summary:       "Delete a project's secret (admin of the project); a job naming it that has not started fails without running",
		DefaultStatus: http.StatusNoContent,
		Metadata:      map[string]any{metaRole: queue.RoleAdmin},
	}, s.deleteSecret)
}

// WebhookTester posts a test message to the webhook whose URL a project's
// secret holds.
type WebhookTester interface {
	TestPost(ctx context.Context, project, name, by string) (*queue.WebhookTest, error)
}

func (s *Server) registerWebhooks(api huma.API) {
	register(api, huma.Operation{
		OperationID: "test-webhook", Errors: []int{404, 422, 501}, Method: http.MethodPost, Path: "/v1/projects/{project}/webhooks/{name}/test", Tags: []string{"jobs"},
		Summary: "Post a test message to the webhook a project's secret holds, as the end of a job naming it in notify.webhook would be posted (submit role)",
		Description: "The server posts `{\"text\": \"gpuq: a test post to webhook NAME of project P, asked for by TOKEN: …\", \"test\": true}` from where it posts the ends of jobs, " +
			"with the same rules (public addresses only unless notifications.allow_private_addresses, no redirect followed, notifications.timeout) and once, and answers how it went: " +
			"`delivered`, the webhook's `http_status`, and `error` saying why it failed. The answer holds the webhook's host, never its URL. " +
			"404 when the secret is not set; 501 when the server posts to no webhooks.",
		Metadata: map[string]any{metaRole: queue.RoleSubmit},
	}, s.testWebhook)
}

func (s *Server) testWebhook(ctx context.Context, in *secretInput) (*struct{ Body *queue.WebhookTest }, error) {
	if err := checkSecretInput(ctx, in); err != nil {
		return nil, err
	}
	if s.cfg.Webhooks == nil {
		return nil, huma.Error501NotImplemented("this server posts to no webhooks")
	}
	tok := tokenOf(ctx)
	res, err := s.cfg.Webhooks.TestPost(ctx, in.Project, in.Name, cmp.Or(tok.Name, tok.Prefix))
	if errors.Is(err, queue.ErrSecretMissing) {
		return nil, huma.Error404NotFound(fmt.Sprintf("secret %s is not set for project %s: gpuq secret set --project %[2]s %[1]s first", in.Name, in.Project))
	}
	if err != nil {
		return nil, internal(s.cfg.Logger, "posting a test message to a webhook", err)
	}
	s.cfg.Logger.Info("test post to a webhook", "project", in.Project, "secret", in.Name, "host", res.Host, "delivered", res.Delivered, "token", tok.ID.String())
	return &struct{ Body *queue.WebhookTest }{Body: res}, nil
}

func (s *Server) listSecrets(ctx context.Context, in *projectInput) (*struct{ Body *Secrets }, error) {
	if !tokenOf(ctx).Sees(in.Project) {
		return nil, huma.Error404NotFound("project " + in.Project + " not found")
	}
	list, err := s.cfg.Store.Secrets(ctx, in.Project)
	if err != nil {
		return nil, internal(s.cfg.Logger, "listing secrets", err)
	}
	return &struct{ Body *Secrets }{Body: &Secrets{Project: in.Project, Secrets: list}}, nil
}

// checkSecretInput refuses a project the token does not see (404) and a
// name no secret can have (422).
func checkSecretInput(ctx context.Context, in *secretInput) error {
	if !tokenOf(ctx).Sees(in.Project) {
		return huma.Error404NotFound("project " + in.Project + " not found")
	}
	if err := queue.ValidateSecretName(in.Name); err != nil {
		return huma.Error422UnprocessableEntity("invalid secret name", &huma.ErrorDetail{Location: "path.name", Message: err.Error(), Value: in.Name})
	}
	return nil
}

func (s *Server) setSecret(ctx context.Context, in *setSecretInput) (*struct{ Body *queue.Secret }, error) {
	if err := checkSecretInput(ctx, &secretInput{Project: in.Project, Name: in.Name}); err != nil {
		return nil, err
	}
	if err := queue.ValidateSecretValue(in.Body.Value); err != nil {
		return nil, huma.Error422UnprocessableEntity("invalid secret value", &huma.ErrorDetail{Location: "body.value", Message: err.Error()})
	}
	sec, err := s.cfg.Store.SetSecret(ctx, in.Project, in.Name, in.Body.Value, tokenOf(ctx).ID.String())
	if errors.Is(err, queue.ErrTooManySecrets) {
		return nil, huma.Error409Conflict(err.Error())
	}
	if err != nil {
		return nil, internal(s.cfg.Logger, "setting a secret", err)
	}
	s.cfg.Logger.Info("secret set", "project", in.Project, "name", in.Name, "token", sec.SetBy)
	return &struct{ Body *queue.Secret }{Body: sec}, nil
}

func (s *Server) deleteSecret(ctx context.Context, in *secretInput) (*struct{}, error) {
	if err := checkSecretInput(ctx, in); err != nil {
		return nil, err
	}
	err := s.cfg.Store.DeleteSecret(ctx, in.Project, in.Name)
	if errors.Is(err, queue.ErrNotFound) {
		return nil, huma.Error404NotFound(fmt.Sprintf("secret %s is not set for project %s", in.Name, in.Project))
	}
	if err != nil {
		return nil, internal(s.cfg.Logger, "deleting a secret", err)
	}
	s.cfg.Logger.Info("secret deleted", "project", in.Project, "name", in.Name, "token", tokenOf(ctx).ID.String())
	return &struct{}{}, nil
}

// checkSecrets refuses a spec naming a secret its project does not hold,
// in spec.secrets or spec.notify.webhook, located under location (spec, or
// body.jobs[i]).
func (s *Server) checkSecrets(ctx context.Context, spec *queue.Spec, location string) error {
	names := spec.NamedSecrets()
	if len(names) == 0 {
		return nil
	}
	missing, err := s.cfg.Store.MissingSecrets(ctx, spec.Project, names)
	if err != nil {
		return internal(s.cfg.Logger, "looking up secrets", err)
	}
	var bad []error
	refuse := func(at, n string) {
		bad = append(bad, &huma.ErrorDetail{Location: at, Value: n, Message: fmt.Sprintf(
			"secret %s is not set for project %s: gpuq secret set --project %s %s first", n, spec.Project, spec.Project, n)})
	}
	for i, n := range spec.Secrets {
		if slices.Contains(missing, n) {
			refuse(fmt.Sprintf("%s.secrets[%d]", location, i), n)
		}
	}
	if n := spec.Notify; n != nil && slices.Contains(missing, n.Webhook) && !slices.Contains(spec.Secrets, n.Webhook) {
		refuse(location+".notify.webhook", n.Webhook)
	}
	if len(bad) > 0 {
		return huma.Error422UnprocessableEntity("invalid job spec", bad...)
	}
	return nil
}
