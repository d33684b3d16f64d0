package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control/httpapi"
)

// A project's admin sets and deletes its secrets, any token of it lists
// their names, and no answer ever holds a value: not the set's, not a
// refusal of a bad one, not a job naming it. A spec naming a secret its
// project does not hold is refused naming the field, alone or in a batch.
func TestAProjectsSecretsAreSetByItsAdminAndNeverShown(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	doc := loadOpenAPI(t)
	admin := e.token(queue.RoleAdmin, nil, "ml")
	submitter := e.token(queue.RoleSubmit, nil, "ml")
	reader := e.token(queue.RoleRead, nil, "ml")
	vision := e.token(queue.RoleAdmin, nil, "vision")
	const value = "hf_secret_9f8e7d6c5b4a"
	call := func(method, path, token, body string, want int) *response {
		t.Helper()
		var data []byte
		if body != "" {
			data = []byte(body)
		}
		r := e.do(method, path, token, "application/json", data)
		if r.Status != want {
			t.Fatalf("%s %s: %d, want %d: %s", method, path, r.Status, want, r.Body)
		}
		if strings.Contains(string(r.Body), value) {
			t.Fatalf("%s %s answered a secret's value: %s", method, path, r.Body)
		}
		template := "/v1/projects/{project}/secrets"
		switch {
		case strings.HasPrefix(path, "/v1/jobs/"):
			template = "/v1/jobs/{id}"
		case strings.Count(path, "/") == 5:
			template += "/{name}"
		}
		doc.check(t, method, template, r)
		return r
	}
	set := `{"value": "` + value + `"}`

	var sec queue.Secret
	call("PUT", "/v1/projects/ml/secrets/HF_TOKEN", admin, set, http.StatusOK).json(t, &sec)
	if sec.Project != "ml" || sec.Name != "HF_TOKEN" || sec.SetBy == "" || sec.SetAt.IsZero() {
		t.Fatalf("set answered %+v", sec)
	}
	call("PUT", "/v1/projects/ml/secrets/HF_TOKEN", admin, set, http.StatusOK)
	// Only a project's admin sets or deletes; only its tokens see them.
	call("PUT", "/v1/projects/ml/secrets/HF_TOKEN", submitter, set, http.StatusForbidden)
	call("DELETE", "/v1/projects/ml/secrets/HF_TOKEN", submitter, "", http.StatusForbidden)
	call("PUT", "/v1/projects/ml/secrets/HF_TOKEN", vision, set, http.StatusNotFound)
	call("GET", "/v1/projects/ml/secrets", vision, "", http.StatusNotFound)
	call("PUT", "/v1/projects/ml/secrets/HF_TOKEN", "", set, http.StatusUnauthorized)
	var list httpapi.Secrets
	call("GET", "/v1/projects/ml/secrets", reader, "", http.StatusOK).json(t, &list)
	if list.Project != "ml" || len(list.Secrets) != 1 || list.Secrets[0].Name != "HF_TOKEN" {
		t.Fatalf("list: %+v", list)
	}

	// Bad names and values, refused naming the field; a refused value is
	// not echoed.
	problemAt(t, call("PUT", "/v1/projects/ml/secrets/GPUQ_TOKEN", admin, set, http.StatusUnprocessableEntity), "path.name", "GPUQ_* variables are set by the worker")
	call("PUT", "/v1/projects/ml/secrets/hf-token", admin, set, http.StatusUnprocessableEntity)
	problemAt(t, call("PUT", "/v1/projects/ml/secrets/EMPTY", admin, `{"value": ""}`, http.StatusUnprocessableEntity), "body.value", "must not be empty")
	problemAt(t, call("PUT", "/v1/projects/ml/secrets/NUL", admin, `{"value": "`+value+`\u0000"}`, http.StatusUnprocessableEntity), "body.value", "must not hold a NUL byte")
	long := strings.Repeat(value, queue.MaxSecretBytes/len(value)+1)
	problemAt(t, call("PUT", "/v1/projects/ml/secrets/LONG", admin, `{"value": "`+long+`"}`, http.StatusUnprocessableEntity), "body.value", fmt.Sprintf("must be at most %d bytes", queue.MaxSecretBytes))

	// Submitting: a job names the secrets of its project only.
	job := e.submit(submitter, "project: ml\ncommand: [python3, train.py]\nsecrets: [HF_TOKEN]\n")
	if len(job.Spec.Secrets) != 1 || job.Spec.Secrets[0] != "HF_TOKEN" {
		t.Fatalf("the job's spec lost its secrets: %+v", job.Spec)
	}
	call("GET", "/v1/jobs/"+job.ID.String(), submitter, "", http.StatusOK)
	r := e.do("POST", "/v1/jobs", submitter, "application/yaml", []byte("project: ml\ncommand: [python3, train.py]\nsecrets: [HF_TOKEN, WANDB_API_KEY]\n"))
	if r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("a spec naming a secret not set: %d, want 422: %s", r.Status, r.Body)
	}
	problemAt(t, r, "spec.secrets[1]", "secret WANDB_API_KEY is not set for project ml: gpuq secret set --project ml WANDB_API_KEY first")
	batch := `{"jobs": [{"project": "ml", "name": "first", "command": ["true"], "secrets": ["HF_TOKEN"]}, {"project": "ml", "command": ["true"], "secrets": ["AWS_KEY"]}]}`
	r = e.do("POST", "/v1/jobs/batch", submitter, "application/json", []byte(batch))
	if r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("a batch naming a secret not set: %d, want 422: %s", r.Status, r.Body)
	}
	problemAt(t, r, "body.jobs[1].secrets[0]", "secret AWS_KEY is not set for project ml")
	// A webhook's secret (spec.notify) is checked as any secret of the
	// spec, and located at its own field; one also in secrets once.
	notified := e.submit(submitter, "project: ml\ncommand: [\"true\"]\nnotify: {webhook: HF_TOKEN, when: [failed]}\n")
	if notified.Spec.Notify == nil || notified.Spec.Notify.Webhook != "HF_TOKEN" {
		t.Fatalf("the job's spec lost its notify: %+v", notified.Spec)
	}
	r = e.do("POST", "/v1/jobs", submitter, "application/yaml", []byte("project: ml\ncommand: [\"true\"]\nnotify: {webhook: SLACK_HOOK}\n"))
	problemAt(t, r, "spec.notify.webhook", "secret SLACK_HOOK is not set for project ml: gpuq secret set --project ml SLACK_HOOK first")
	r = e.do("POST", "/v1/jobs", submitter, "application/yaml", []byte("project: ml\ncommand: [\"true\"]\nsecrets: [SLACK_HOOK]\nnotify: {webhook: SLACK_HOOK}\n"))
	if r.Status != http.StatusUnprocessableEntity || strings.Contains(string(r.Body), "spec.notify.webhook") {
		t.Fatalf("a secret not set, named twice: %d %s", r.Status, r.Body)
	}
	problemAt(t, r, "spec.secrets[0]", "secret SLACK_HOOK is not set")
	batch = `{"jobs": [{"project": "ml", "command": ["true"]}, {"project": "ml", "command": ["true"], "notify": {"webhook": "SLACK_HOOK"}}]}`
	problemAt(t, e.do("POST", "/v1/jobs/batch", submitter, "application/json", []byte(batch)), "body.jobs[1].notify.webhook", "secret SLACK_HOOK is not set for project ml")

	// Deleted: gone from the list, a second delete is 404, and a retry of
	// a job naming it is refused until it is set again.
	call("DELETE", "/v1/projects/ml/secrets/HF_TOKEN", admin, "", http.StatusNoContent)
	call("DELETE", "/v1/projects/ml/secrets/HF_TOKEN", admin, "", http.StatusNotFound)
	call("GET", "/v1/projects/ml/secrets", reader, "", http.StatusOK).json(t, &list)
	if len(list.Secrets) != 0 {
		t.Fatalf("list after delete: %+v", list)
	}
	jobPath := "/v1/jobs/" + job.ID.String()
	if r := e.do("POST", jobPath+"/cancel", submitter, "", nil); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	r = e.do("POST", jobPath+"/retry", submitter, "", nil)
	if r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), "secret HF_TOKEN is not set for project ml") {
		t.Fatalf("retry of a job whose secret is gone: %d %s", r.Status, r.Body)
	}
	call("PUT", "/v1/projects/ml/secrets/HF_TOKEN", admin, set, http.StatusOK)
	if r := e.do("POST", jobPath+"/retry", submitter, "", nil); r.Status != http.StatusOK {
		t.Fatalf("retry once the secret is set again: %d %s", r.Status, r.Body)
	}
}

// A token of a project that may submit its jobs has the server post a test
// message to the webhook a secret of the project holds, and reads how it
// went; the answer names the webhook's host, never its URL. A secret not
// set, a project the token does not see: 404; a reader: 403; a server
// that posts to no webhooks: 501.
func TestATestPostToAProjectsWebhookSaysHowItWent(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	doc := loadOpenAPI(t)
	var (
		mu     sync.Mutex
		posted []string
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		posted = append(posted, r.URL.Path+" "+string(b))
		mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/gone/") {
			http.Error(w, "no_service", http.StatusNotFound)
		}
	}))
	t.Cleanup(hook.Close)
	const token = "T0AB12/B0CD34/XyZsecretPart"
	admin := e.token(queue.RoleAdmin, nil, "ml")
	submitter := e.token(queue.RoleSubmit, nil, "ml")
	reader := e.token(queue.RoleRead, nil, "ml")
	vision := e.token(queue.RoleSubmit, nil, "vision")
	for name, path := range map[string]string{"SLACK_HOOK": "/ok/", "OLD_HOOK": "/gone/"} {
		if r := e.do("PUT", "/v1/projects/ml/secrets/"+name, admin, "application/json", []byte(`{"value": "`+hook.URL+path+token+`"}`)); r.Status != http.StatusOK {
			t.Fatalf("setting %s: %d %s", name, r.Status, r.Body)
		}
	}
	call := func(path, tok string, want int) *response {
		t.Helper()
		r := e.do("POST", path, tok, "", nil)
		if r.Status != want {
			t.Fatalf("POST %s: %d, want %d: %s", path, r.Status, want, r.Body)
		}
		if strings.Contains(string(r.Body), "secretPart") {
			t.Fatalf("POST %s answered the webhook's URL: %s", path, r.Body)
		}
		doc.check(t, "POST", "/v1/projects/{project}/webhooks/{name}/test", r)
		return r
	}
	postedSoFar := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(posted)
	}
	var res queue.WebhookTest
	call("/v1/projects/ml/webhooks/SLACK_HOOK/test", submitter, http.StatusOK).json(t, &res)
	if got := postedSoFar(); !res.Delivered || res.HTTPStatus != 200 || res.Host != "127.0.0.1" || res.Error != "" || len(got) != 1 ||
		!strings.HasPrefix(got[0], "/ok/"+token+" ") || !strings.Contains(got[0], `"test":true`) {
		t.Fatalf("a test post: %+v; posted %q", res, got)
	}
	call("/v1/projects/ml/webhooks/OLD_HOOK/test", submitter, http.StatusOK).json(t, &res)
	if res.Delivered || res.HTTPStatus != 404 || res.Error != "posting to 127.0.0.1: HTTP 404: no_service" {
		t.Fatalf("a test post to a webhook that is gone: %+v", res)
	}
	if r := call("/v1/projects/ml/webhooks/NOT_SET/test", submitter, http.StatusNotFound); !strings.Contains(string(r.Body),
		"secret NOT_SET is not set for project ml: gpuq secret set --project ml NOT_SET first") {
		t.Fatalf("a test post to a secret not set: %s", r.Body)
	}
	call("/v1/projects/ml/webhooks/SLACK_HOOK/test", vision, http.StatusNotFound)
	call("/v1/projects/ml/webhooks/SLACK_HOOK/test", reader, http.StatusForbidden)
	call("/v1/projects/ml/webhooks/slack-hook/test", submitter, http.StatusUnprocessableEntity)
	if got := postedSoFar(); len(got) != 2 {
		t.Fatalf("posts: %q, want the two tests only", got)
	}

	none := startEnv(t, func(c *httpapi.Config) { c.Webhooks = nil })
	if r := none.do("POST", "/v1/projects/ml/webhooks/SLACK_HOOK/test", none.token(queue.RoleSubmit, nil, "ml"), "", nil); r.Status != http.StatusNotImplemented {
		t.Fatalf("a server posting to no webhooks: %d %s", r.Status, r.Body)
	}
}
