package httpapi_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/cmd/gpuq/cli"
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

// gpuq quota shows, sets and clears a project's storage quota through the
// API, and on the control-plane host through the database, where the
// config file's quota is the default; -o json is the API's document.
func TestQuotaCommandsShowSetAndClearAProjectsQuotaThroughTheAPIAndTheDatabase(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	dir := t.TempDir()
	config := func(name, body string) string {
		f := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	gpuq := runCLI
	asOwn := []string{"--url", e.URL, "--config", config("own", "token: "+e.token(queue.RoleAdmin, nil, "p")+"\n")}
	asGlobal := []string{"--url", e.URL, "--config", config("global", "token: "+e.token(queue.RoleAdmin, nil, queue.AllProjects)+"\n")}
	overDB := []string{"--database-url", e.DBURL, "--config", config("host", "storage: {project_quotas: {p: 10MiB}}\n")}

	out, errOut, code := gpuq(append([]string{"quota", "show", "--project", "p"}, asOwn...)...)
	if code != 0 || !strings.Contains(out, "quota    none (the servers' config file sets none)") || !strings.Contains(out, "stored   0 B (0 bytes)") {
		t.Fatalf("quota show by the project's admin: %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := gpuq(append([]string{"quota", "set", "--project", "p", "1GiB"}, asOwn...)...); code == 0 || !strings.Contains(errOut, "admin token for all projects") {
		t.Fatalf("a project's admin must not lift its quota: %d %s", code, errOut)
	}
	out, errOut, code = gpuq(append([]string{"quota", "set", "--project", "p", "1GiB"}, asGlobal...)...)
	if code != 0 || !strings.Contains(out, "quota    1.0 GiB (1073741824 bytes; set by an admin)") || !strings.Contains(out, "0.0% of the quota") {
		t.Fatalf("quota set: %d\n%s%s", code, out, errOut)
	}
	viaAPI, _, _ := gpuq(append([]string{"quota", "show", "--project", "p", "-o", "json"}, asOwn...)...)
	viaDB, errOut, code := gpuq(append([]string{"quota", "show", "--project", "p", "-o", "json"}, overDB...)...)
	if code != 0 || viaAPI != viaDB || !strings.Contains(viaDB, `"quota_bytes": 1073741824`) {
		t.Fatalf("quota show -o json must be the same either way: %d %s\n%s\n%s", code, errOut, viaAPI, viaDB)
	}
	if _, errOut, code := gpuq(append([]string{"quota", "set", "--project", "p", "lots"}, asGlobal...)...); code == 0 || !strings.Contains(errOut, `SIZE: want a size such as 10GiB or 500MB, got "lots"`) {
		t.Errorf("a bad size: %d %s", code, errOut)
	}
	out, errOut, code = gpuq(append([]string{"quota", "clear", "--project", "p"}, overDB...)...)
	if code != 0 || !strings.Contains(out, "quota    10 MiB (10485760 bytes; the servers' config file)") {
		t.Fatalf("quota clear on the host brings the config file's back: %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := gpuq(append([]string{"quota", "clear", "--project", "p"}, asGlobal...)...); code != cli.ExitNotFound || !strings.Contains(errOut, "no quota set") {
		t.Errorf("clearing a quota no admin set: %d %s", code, errOut)
	}
	if _, errOut, code := gpuq(append([]string{"quota", "show", "--project", "q"}, asOwn...)...); code != cli.ExitNotFound || !strings.Contains(errOut, "project q not found") {
		t.Errorf("another project's quota: %d %s", code, errOut)
	}
	if _, errOut, code := gpuq(append([]string{"quota", "show"}, asOwn...)...); code == 0 || !strings.Contains(errOut, "--project: required") {
		t.Errorf("without --project: %d %s", code, errOut)
	}
}

// runCLI runs the gpuq command line in this process and returns its
// standard output, standard error and exit status.
func runCLI(args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	code := cli.Main(args, &out, &errOut)
	return out.String(), errOut.String(), code
}
