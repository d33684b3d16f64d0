package httpapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/gpuq/gpuq/queue"
)

// Only an admin of every project sets or clears a project's storage quota
// (a project's own admin could lift it); the project's admin reads it; any
// other project's is 404.
func TestAProjectsStorageQuotaIsSetByAnAdminOfAllProjects(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	doc := loadOpenAPI(t)
	global := e.token(queue.RoleAdmin, nil, queue.AllProjects)
	own := e.token(queue.RoleAdmin, nil, "p")
	body := []byte(`{"quota_bytes": 1048576}`)

	r := e.do("GET", "/v1/projects/p/quota", own, "", nil)
	doc.check(t, "GET", "/v1/projects/{project}/quota", r)
	var q queue.ProjectQuota
	r.json(t, &q)
	if r.Status != http.StatusOK || q.Source != "config" || q.Bytes != 0 {
		t.Fatalf("before any is set, the config file's quota: %d %s", r.Status, r.Body)
	}
	for _, tok := range []string{own, e.token(queue.RoleSubmit, nil, queue.AllProjects)} {
		if r := e.do("PUT", "/v1/projects/p/quota", tok, "application/json", body); r.Status != http.StatusForbidden {
			t.Errorf("PUT quota with a token not admin of all projects: %d %s, want 403", r.Status, r.Body)
		}
		if r := e.do("DELETE", "/v1/projects/p/quota", tok, "", nil); r.Status != http.StatusForbidden {
			t.Errorf("DELETE quota with a token not admin of all projects: %d %s, want 403", r.Status, r.Body)
		}
	}
	if got, err := e.Store.ProjectQuota(context.Background(), "p"); err != nil || got.Source != "config" {
		t.Fatalf("refused requests must set nothing: %+v %v", got, err)
	}
	if r := e.do("PUT", "/v1/projects/p/quota", global, "application/json", []byte(`{"quota_bytes": -1}`)); r.Status != http.StatusUnprocessableEntity {
		t.Errorf("a negative quota: %d %s, want 422", r.Status, r.Body)
	}
	r = e.do("PUT", "/v1/projects/p/quota", global, "application/json", body)
	doc.check(t, "PUT", "/v1/projects/{project}/quota", r)
	r.json(t, &q)
	if r.Status != http.StatusOK || q.Source != "admin" || q.Bytes != 1<<20 || q.SetBy == "" {
		t.Fatalf("PUT quota by an admin of all projects: %d %s", r.Status, r.Body)
	}
	if got, err := e.Store.ProjectQuota(context.Background(), "p"); err != nil || got.Bytes != 1<<20 {
		t.Fatalf("the quota the store checks checkpoints against: %+v %v", got, err)
	}
	if r := e.do("GET", "/v1/projects/q/quota", own, "", nil); r.Status != http.StatusNotFound {
		t.Errorf("another project's quota: %d, want 404", r.Status)
	}
	r = e.do("DELETE", "/v1/projects/p/quota", global, "", nil)
	doc.check(t, "DELETE", "/v1/projects/{project}/quota", r)
	r.json(t, &q)
	if r.Status != http.StatusOK || q.Source != "config" {
		t.Fatalf("DELETE quota: %d %s", r.Status, r.Body)
	}
	if r := e.do("DELETE", "/v1/projects/p/quota", global, "", nil); r.Status != http.StatusNotFound {
		t.Errorf("DELETE of a quota not set: %d, want 404", r.Status)
	}
	if r := e.do("GET", "/v1/projects/p/quota", "", "", nil); r.Status != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", r.Status)
	}
}
