package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/workers"
)

// packedDir packs a directory holding train.py as a client does and
// returns the archive and its hex digest.
func packedDir(t *testing.T, content string) ([]byte, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "train.py"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := workers.PackWorkdir(dir, t.TempDir(), queue.DefaultWorkdirMaxBytes, func(msg string) { t.Errorf("packing warned: %s", msg) })
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(w.Path)
	if err != nil {
		t.Fatal(err)
	}
	return data, w.SHA256
}

func TestAnUploadedWorkingDirectoryIsNamedBySpecsOfItsProjectOnly(t *testing.T) {
	t.Parallel()
	e := startEnv(t, func(c *httpapi.Config) { c.Workdirs.MaxBytes = 64 << 10 })
	doc := loadOpenAPI(t)
	ml := e.token(queue.RoleSubmit, nil, "ml")
	both := e.token(queue.RoleSubmit, nil, "ml", "vision")
	reader := e.token(queue.RoleRead, nil, "ml")
	data, sum := packedDir(t, "print('hello')\n")
	const template = "/v1/workdirs/{sha256}"
	put := func(token, path string, body []byte, want int) *response {
		t.Helper()
		r := e.do("PUT", path, token, "application/gzip", body)
		if r.Status != want {
			t.Fatalf("PUT %s: %d, want %d: %s", path, r.Status, want, r.Body)
		}
		doc.check(t, "PUT", template, r)
		return r
	}

	// A token of one project uploads for it by default.
	var got httpapi.Workdir
	put(ml, "/v1/workdirs/"+sum, data, http.StatusOK).json(t, &got)
	if got != (httpapi.Workdir{Workdir: "sha256:" + sum, Project: "ml", Bytes: int64(len(data))}) {
		t.Fatalf("upload answered %+v", got)
	}
	// Again: harmless.
	put(ml, "/v1/workdirs/"+sum, data, http.StatusOK)

	// What the body is not is refused, and nothing is stored under the
	// digest it claimed.
	_, otherSum := packedDir(t, "print('other')\n")
	problemAt(t, put(ml, "/v1/workdirs/"+otherSum, data, http.StatusUnprocessableEntity), "path.sha256", "the body's SHA-256 is "+sum)
	plain := []byte("not a gzip archive")
	plainSum := sha256.Sum256(plain)
	problemAt(t, put(ml, "/v1/workdirs/"+hex.EncodeToString(plainSum[:]), plain, http.StatusUnprocessableEntity), "body", "not a gzip-compressed tar")
	big := make([]byte, 65<<10)
	big[0], big[1] = 0x1f, 0x8b
	bigSum := sha256.Sum256(big)
	r := put(ml, "/v1/workdirs/"+hex.EncodeToString(bigSum[:]), big, http.StatusRequestEntityTooLarge)
	if !strings.Contains(string(r.Body), "storage.workdir_max_bytes") {
		t.Fatalf("413 must name the setting: %s", r.Body)
	}
	put(ml, "/v1/workdirs/NOT-A-DIGEST", data, http.StatusUnprocessableEntity)
	// Another project's, or with a read token: refused.
	problemAt(t, put(ml, "/v1/workdirs/"+sum+"?project=vision", data, http.StatusForbidden), "query.project", "not one of this token's projects")
	put(reader, "/v1/workdirs/"+sum, data, http.StatusForbidden)
	put("", "/v1/workdirs/"+sum, data, http.StatusUnauthorized)

	// A spec of the project names it; one of another project, or naming a
	// directory never uploaded (the refused one above), is refused naming
	// the field, and nothing is submitted.
	job := e.submit(ml, "project: ml\nworkdir: sha256:"+sum+"\ncommand: [python3, train.py]\n")
	if job.Spec.Workdir != "sha256:"+sum {
		t.Fatalf("the job's spec lost its workdir: %+v", job.Spec)
	}
	for _, spec := range []string{
		"project: vision\nworkdir: sha256:" + sum + "\ncommand: [python3, train.py]\n",
		"project: ml\nworkdir: sha256:" + otherSum + "\ncommand: [python3, train.py]\n",
	} {
		r := e.do("POST", "/v1/jobs", both, "application/yaml", []byte(spec))
		if r.Status != http.StatusUnprocessableEntity {
			t.Fatalf("submitting %q: %d, want 422: %s", spec, r.Status, r.Body)
		}
		problemAt(t, r, "spec.workdir", "is not uploaded for project")
	}
	r = e.do("POST", "/v1/jobs", ml, "application/yaml", []byte("project: ml\nworkdir: ./src\ncommand: [python3, train.py]\n"))
	if r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("a local path as workdir: %d, want 422: %s", r.Status, r.Body)
	}
	problemAt(t, r, "spec.workdir", `must name an uploaded directory as "sha256:"`)
	batch := `{"jobs": [{"project": "ml", "name": "first", "command": ["true"]}, {"project": "ml", "workdir": "sha256:` + otherSum + `", "command": ["true"]}]}`
	r = e.do("POST", "/v1/jobs/batch", ml, "application/json", []byte(batch))
	if r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("a batch naming a directory never uploaded: %d, want 422: %s", r.Status, r.Body)
	}
	problemAt(t, r, "body.jobs[1].workdir", "is not uploaded for project ml")
	var page httpapi.JobPage
	e.do("GET", "/v1/jobs?project=ml", ml, "", nil).json(t, &page)
	for _, j := range page.Jobs {
		if j.Name == "first" {
			t.Fatalf("a refused batch submitted its first job: %+v", j)
		}
	}

	// A retry runs the job again while its directory is stored; once the
	// upload is gone it is refused, saying how to bring it back, and the
	// job stays as it was.
	jobPath := "/v1/jobs/" + job.ID.String()
	cancel := func() {
		t.Helper()
		if r := e.do("POST", jobPath+"/cancel", ml, "", nil); r.Status != http.StatusOK {
			t.Fatalf("cancel: %d %s", r.Status, r.Body)
		}
	}
	cancel()
	if r := e.do("POST", jobPath+"/retry", ml, "", nil); r.Status != http.StatusOK {
		t.Fatalf("retry while the directory is stored: %d %s", r.Status, r.Body)
	}
	cancel()
	upload := queue.ArchiveScheme + queue.WorkdirBucket + "/" + queue.WorkdirObject("ml", sum)
	if err := (&workers.ObjectStore{JS: e.NATS.JS}).Delete(context.Background(), upload); err != nil {
		t.Fatal(err)
	}
	r = e.do("POST", jobPath+"/retry", ml, "", nil)
	if r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), "its working directory sha256:"+sum+" is not stored for project ml") {
		t.Fatalf("retry once the directory is gone: %d %s", r.Status, r.Body)
	}
	var after queue.Job
	e.do("GET", jobPath, ml, "", nil).json(t, &after)
	if after.State != queue.StateCancelled {
		t.Fatalf("a refused retry changed the job: %+v", after)
	}
}

func TestAServerWithoutWorkingDirectoriesSaysSo(t *testing.T) {
	t.Parallel()
	e := startEnv(t, func(c *httpapi.Config) { c.Workdirs = nil })
	ml := e.token(queue.RoleSubmit, nil, "ml")
	data, sum := packedDir(t, "print('hello')\n")
	if r := e.do("PUT", "/v1/workdirs/"+sum, ml, "application/gzip", data); r.Status != http.StatusNotImplemented {
		t.Fatalf("upload: %d, want 501: %s", r.Status, r.Body)
	}
	r := e.do("POST", "/v1/jobs", ml, "application/yaml", []byte("project: ml\nworkdir: sha256:"+sum+"\ncommand: [/bin/true]\n"))
	if r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), "keeps no working directories") {
		t.Fatalf("a spec naming a workdir: %d, want 422: %s", r.Status, r.Body)
	}
}
