package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/workers"
)

// A succeeded job whose outputs are recorded but whose archive is gone from
// its bucket answers 410 naming the archive, not a 500 that sends the user
// to the server's log.
func TestResultsWhoseArchiveIsLostAnswer410NamingIt(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	doc := loadOpenAPI(t)
	tok := e.token(queue.RoleRead, nil, "ml")
	job := e.submit(e.token(queue.RoleSubmit, nil, "ml"), "project: ml\ncommand: [/bin/sh, -c, 'echo result > $GPUQ_OUTPUT_DIR/out.txt']\n")
	e.waitState(tok, job.ID, queue.StateSucceeded)
	ctx := context.Background()
	rec, err := e.Store.Result(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&workers.ObjectStore{JS: e.NATS.JS}).Delete(ctx, rec.StoreURI); err != nil {
		t.Fatal(err)
	}
	id := job.ID.String()
	for _, c := range []struct{ template, path string }{
		{"/v1/jobs/{id}/results", "/v1/jobs/" + id + "/results"},
		{"/v1/jobs/{id}/results/archive", "/v1/jobs/" + id + "/results/archive"},
		{"/v1/jobs/{id}/results/file", "/v1/jobs/" + id + "/results/file?path=out.txt"},
	} {
		r := e.do("GET", c.path, tok, "", nil)
		doc.check(t, "GET", c.template, r)
		if r.Status != http.StatusGone || !strings.Contains(string(r.Body), "outputs are recorded, but downloading "+rec.StoreURI+": archive lost: not in its bucket") {
			t.Errorf("GET %s: %d %s; want 410 naming the lost archive", c.path, r.Status, r.Body)
		}
	}
}
