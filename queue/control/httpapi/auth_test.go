package httpapi_test

import (
	"context"
	"database/sql"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/sql/migrations"
	"github.com/gpuq/gpuq/sql/pgtemp"
	"github.com/gpuq/gpuq/workers"
)

func TestATokenSeesAndActsOnItsOwnProjectsOnly(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	a := e.token(queue.RoleAdmin, nil, "a")
	b := e.token(queue.RoleSubmit, nil, "b")
	jobB := e.submit(b, "command: [sleep, '30']\n")
	if jobB.Project != "b" {
		t.Fatalf("a token of one project submits into it by default; got %q", jobB.Project)
	}
	id := jobB.ID.String()
	for _, path := range []string{"/v1/jobs/" + id, "/v1/jobs/" + id + "/status", "/v1/jobs/" + id + "/logs", "/v1/jobs/" + id + "/events",
		"/v1/jobs/" + id + "/logs?follow=true", "/v1/jobs/" + id + "/results", "/v1/jobs/" + id + "/results/archive",
		"/v1/jobs/" + id + "/results/file?path=x", "/v1/jobs/" + id + "/checkpoints", "/v1/jobs/" + id + "/placement",
		"/v1/projects/b/spend", "/v1/projects/b/events"} {
		if r := e.do("GET", path, a, "", nil); r.Status != http.StatusNotFound {
			t.Errorf("GET %s with project a's token: %d, want 404", path, r.Status)
		}
	}
	for _, op := range []string{"cancel", "retry"} {
		if r := e.do("POST", "/v1/jobs/"+id+"/"+op, a, "", nil); r.Status != http.StatusNotFound {
			t.Errorf("%s of project b's job with project a's token: %d, want 404", op, r.Status)
		}
	}
	r := e.do("POST", "/v1/jobs", a, "application/yaml", []byte("project: b\ncommand: [/bin/true]\n"))
	if r.Status != http.StatusForbidden || !strings.Contains(string(r.Body), "spec.project") {
		t.Errorf("submit into project b with project a's token: %d %s, want 403 naming spec.project", r.Status, r.Body)
	}
	var page httpapi.JobPage
	e.do("GET", "/v1/jobs?project=b", a, "", nil).json(t, &page)
	if len(page.Jobs) != 0 {
		t.Errorf("project a's token listed project b's jobs: %+v", page.Jobs)
	}
	if r := e.do("DELETE", "/v1/tokens/00000000-0000-0000-0000-000000000000", b, "", nil); r.Status != http.StatusForbidden {
		t.Errorf("a submit token managing tokens: %d, want 403", r.Status)
	}
	var j queue.Job
	e.do("GET", "/v1/jobs/"+id, b, "", nil).json(t, &j)
	if j.State.Terminal() {
		t.Fatalf("project a's requests changed project b's job: %s", j.State)
	}
}

func TestAReadTokenCannotSubmitOrCancel(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	read := e.token(queue.RoleRead, nil, "p")
	submit := e.token(queue.RoleSubmit, nil, "p")
	job := e.submit(submit, "command: [sleep, '30']\n")
	if r := e.do("POST", "/v1/jobs", read, "application/yaml", []byte("command: [/bin/true]\n")); r.Status != http.StatusForbidden {
		t.Errorf("submit with a read token: %d %s, want 403", r.Status, r.Body)
	}
	for _, op := range []string{"cancel", "retry"} {
		if r := e.do("POST", "/v1/jobs/"+job.ID.String()+"/"+op, read, "", nil); r.Status != http.StatusForbidden {
			t.Errorf("%s with a read token: %d %s, want 403", op, r.Status, r.Body)
		}
	}
	if r := e.do("GET", "/v1/jobs/"+job.ID.String(), read, "", nil); r.Status != http.StatusOK {
		t.Errorf("get with a read token: %d, want 200", r.Status)
	}
	var page httpapi.JobPage
	e.do("GET", "/v1/jobs", read, "", nil).json(t, &page)
	if len(page.Jobs) != 1 || page.Jobs[0].State.Terminal() {
		t.Fatalf("the read token's requests changed nothing: %+v", page.Jobs)
	}
}

func TestRevokedExpiredAndMalformedTokensGet401(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	past := time.Now().Add(-time.Minute)
	expired := e.token(queue.RoleAdmin, &past, "p")
	revoked := e.token(queue.RoleAdmin, nil, "p")
	good := e.token(queue.RoleAdmin, nil, "p")
	prefix := queue.TokenLookupPrefix(revoked)
	tok, err := e.Store.TokenByPrefix(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Store.RevokeToken(context.Background(), tok.ID, nil); err != nil {
		t.Fatal(err)
	}
	// The right prefix with a wrong secret is as bad as no token.
	forged := good[:len(good)-4] + "aaaa"
	if forged == good {
		forged = good[:len(good)-4] + "bbbb"
	}
	for name, secret := range map[string]string{"expired": expired, "revoked": revoked, "forged": forged, "malformed": "gpuq_nope", "none": ""} {
		r := e.do("GET", "/v1/jobs", secret, "", nil)
		if r.Status != http.StatusUnauthorized || r.Header.Get("Content-Type") != "application/problem+json" || r.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s token: %d %s %s, want a 401 problem with WWW-Authenticate", name, r.Status, r.Header.Get("Content-Type"), r.Body)
		}
		if secret != "" && strings.Contains(string(r.Body), secret) {
			t.Errorf("%s token: the answer echoes the secret", name)
		}
	}
	if r := e.do("GET", "/v1/jobs", good, "", nil); r.Status != http.StatusOK {
		t.Fatalf("a good token: %d %s", r.Status, r.Body)
	}
}

func TestNoOperationWorksWithoutAToken(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	doc := loadOpenAPI(t)
	admin := e.token(queue.RoleAdmin, nil, "p")
	job := e.submit(admin, "command: [/bin/true]\n")
	params := regexp.MustCompile(`\{(id|project)\}`)
	n := 0
	for path, item := range doc.doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			concrete := params.ReplaceAllStringFunc(path, func(p string) string {
				if p == "{project}" {
					return "p"
				}
				return job.ID.String()
			})
			if strings.HasPrefix(path, "/v1/tokens/") {
				concrete = "/v1/tokens/" + job.ID.String()
			}
			if _, public := op.(map[string]any)["security"]; public {
				if path != "/v1/healthz" {
					t.Errorf("%s %s is documented as needing no token", method, path)
				}
				continue
			}
			n++
			r := e.do(strings.ToUpper(method), concrete, "", "application/json", []byte("{}"))
			if r.Status != http.StatusUnauthorized {
				t.Errorf("%s %s without a token: %d, want 401", method, concrete, r.Status)
			}
			doc.check(t, strings.ToUpper(method), path, r)
		}
	}
	if n < 18 {
		t.Fatalf("only %d operations checked", n)
	}
}

func TestATokenOverItsRateGets429WithRetryAfter(t *testing.T) {
	t.Parallel()
	e := startEnv(t, func(c *httpapi.Config) { c.RatePerSecond, c.Burst = 0.5, 2 })
	tok := e.token(queue.RoleRead, nil, "p")
	other := e.token(queue.RoleRead, nil, "p")
	for i := range 2 {
		if r := e.do("GET", "/v1/jobs", tok, "", nil); r.Status != http.StatusOK {
			t.Fatalf("request %d within the burst: %d", i, r.Status)
		}
	}
	r := e.do("GET", "/v1/jobs", tok, "", nil)
	retry, _ := strconv.Atoi(r.Header.Get("Retry-After"))
	if r.Status != http.StatusTooManyRequests || retry < 1 || retry > 2 {
		t.Fatalf("over the rate: %d, Retry-After %q; want 429 and 1–2 s", r.Status, r.Header.Get("Retry-After"))
	}
	loadOpenAPI(t).check(t, "GET", "/v1/jobs", r)
	if r := e.do("GET", "/v1/jobs", other, "", nil); r.Status != http.StatusOK {
		t.Fatalf("another token has its own allowance: %d", r.Status)
	}
}

func TestTokenUseIsRecordedInBatches(t *testing.T) {
	t.Parallel()
	e := startEnv(t, func(c *httpapi.Config) { c.TouchEvery = 200 * time.Millisecond })
	tok := e.token(queue.RoleRead, nil, "p")
	for range 5 {
		e.do("GET", "/v1/jobs", tok, "", nil)
	}
	queuetest.Eventually(t, 10*time.Second, "the token's last use to be recorded", func() bool {
		rec, err := e.Store.TokenByPrefix(context.Background(), queue.TokenLookupPrefix(tok))
		return err == nil && rec.LastUsedAt != nil && time.Since(*rec.LastUsedAt) < time.Minute
	})
}

// Serve returns only once the tokens' last use is written, so that the
// store may be closed as soon as it returns, as gpuq server and gpuq dev
// close theirs.
func TestServeWritesTheTokensLastUseBeforeItReturns(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	st, dbURL := queuetest.Store(t, n)
	srv, err := httpapi.New(httpapi.Config{Store: st, JS: n.JS, NATS: n.NC, Archives: &workers.ObjectStore{JS: n.JS}, TouchEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := serve(t, srv)
	secret, tok, err := queue.NewTokenSecret("test", []string{"p"}, queue.RoleRead, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateToken(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("GET", "http://"+addr+"/v1/jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/jobs: %d", resp.StatusCode)
	}
	if err := stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	st.Close()
	after, err := store.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	rec, err := after.TokenByPrefix(context.Background(), queue.TokenLookupPrefix(secret))
	if err != nil || rec.LastUsedAt == nil {
		t.Fatalf("when Serve returned, the token's use was not written: %+v, %v", rec, err)
	}
}

func TestATokenForAllProjectsSeesEveryProjectAndOnlySuchAnAdminMakesOne(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	all := e.token(queue.RoleRead, nil, queue.AllProjects)
	p := e.submit(e.token(queue.RoleSubmit, nil, "p"), "command: [sleep, '30']\n")
	q := e.submit(e.token(queue.RoleSubmit, nil, "q"), "command: [sleep, '30']\n")
	var page httpapi.JobPage
	e.do("GET", "/v1/jobs", all, "", nil).json(t, &page)
	if len(page.Jobs) != 2 {
		t.Fatalf("a token of all projects lists every project's jobs: %+v", page.Jobs)
	}
	for _, j := range []*queue.Job{p, q} {
		if r := e.do("GET", "/v1/jobs/"+j.ID.String(), all, "", nil); r.Status != http.StatusOK {
			t.Errorf("GET a job of %s: %d", j.Project, r.Status)
		}
	}
	body := []byte(`{"projects": ["*"], "role": "admin"}`)
	if r := e.do("POST", "/v1/tokens", e.token(queue.RoleAdmin, nil, "p"), "application/json", body); r.Status != http.StatusForbidden {
		t.Errorf("a project admin making a token for all projects: %d %s, want 403", r.Status, r.Body)
	}
	if r := e.do("POST", "/v1/tokens", e.token(queue.RoleAdmin, nil, queue.AllProjects), "application/json", body); r.Status != http.StatusCreated {
		t.Errorf("an admin of all projects making one: %d %s, want 201", r.Status, r.Body)
	}
	if _, _, err := queue.NewTokenSecret("", []string{"*", "p"}, queue.RoleRead, nil); err == nil {
		t.Error(`"*" must stand alone among a token's projects`)
	}
	// A token's name is shown in tables: no terminal escapes in it.
	r := e.do("POST", "/v1/tokens", e.token(queue.RoleAdmin, nil, "p"), "application/json", []byte(`{"name": "a\u001b[2Jb", "projects": ["p"], "role": "read"}`))
	if r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), `"location":"body.name"`) {
		t.Errorf("a token name with a terminal escape: %d %s, want 422 naming body.name", r.Status, r.Body)
	}
}

// While PostgreSQL cannot be reached, a token cannot be checked: the API
// answers 503 with Retry-After, which clients ride through, never 401,
// which would make them give up on a good token. Once PostgreSQL is back
// the same token works.
func TestATokenThatCannotBeCheckedGets503NotA401(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and restarts a PostgreSQL server")
	}
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "pg")
	pg, err := pgtemp.Start(ctx, dir, pgtemp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Destroy() }) //nolint:errcheck // test cleanup
	db, err := sql.Open("pgx", pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	_, err = migrations.Migrate(ctx, db)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	e := startEnvOn(t, queuetest.StartNATS(t), pg.URL(), nil)
	tok := e.token(queue.RoleRead, nil, "p")
	if r := e.do("GET", "/v1/jobs", tok, "", nil); r.Status != http.StatusOK {
		t.Fatalf("with PostgreSQL up: %d %s", r.Status, r.Body)
	}
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	r := e.do("GET", "/v1/jobs", tok, "", nil)
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") != "1" || r.Header.Get("WWW-Authenticate") != "" {
		t.Errorf("with PostgreSQL down: %d, Retry-After %q, WWW-Authenticate %q: want 503 with Retry-After 1 and no challenge; %s",
			r.Status, r.Header.Get("Retry-After"), r.Header.Get("WWW-Authenticate"), r.Body)
	}
	if strings.Contains(string(r.Body), tok) {
		t.Error("the answer echoes the secret")
	}
	loadOpenAPI(t).check(t, "GET", "/v1/jobs", r)
	if pg, err = pgtemp.Start(ctx, dir, pgtemp.Options{Port: pg.Port()}); err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, 30*time.Second, "the token to work again", func() bool {
		return e.do("GET", "/v1/jobs", tok, "", nil).Status == http.StatusOK
	})
}

// While NATS cannot be reached, what needs it (a submission, after its
// retries; a job's events or logs) answers 503 with Retry-After, which
// clients ride through, not 500; what needs only PostgreSQL still answers.
func TestAnAPIWhoseNATSIsDownAnswers503(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	_, url := queuetest.Store(t, n)
	e := startEnvOn(t, n, url, nil)
	tok := e.token(queue.RoleAdmin, nil, "p")
	job := e.submit(tok, "command: [/bin/true]\n")
	n.Server.Stop()
	doc := loadOpenAPI(t)
	path := "/v1/jobs/" + job.ID.String()
	if r := e.do("GET", path, tok, "", nil); r.Status != http.StatusOK {
		t.Errorf("GET %s, which reads PostgreSQL only: %d %s", path, r.Status, r.Body)
	}
	var wg sync.WaitGroup
	for _, c := range []struct{ method, path, doc string }{
		{"GET", path + "/events", "/v1/jobs/{id}/events"},
		{"GET", path + "/logs", "/v1/jobs/{id}/logs"},
		{"GET", path + "/logs?follow=true", "/v1/jobs/{id}/logs"},
		{"POST", "/v1/jobs", "/v1/jobs"},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.do(c.method, c.path, tok, "application/yaml", []byte("command: [/bin/true]\n"))
			if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") != "1" {
				t.Errorf("%s %s with NATS down: %d, Retry-After %q; want 503 with Retry-After 1: %s", c.method, c.path, r.Status, r.Header.Get("Retry-After"), r.Body)
			}
			doc.check(t, c.method, c.doc, r)
		}()
	}
	wg.Wait()
}
