package httpapi_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/cmd/gpuq/cli"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// swissOnly keeps project p's jobs in Switzerland; the env's only pool is
// in Germany.
const swissOnly = "rules:\n  - name: swiss-only\n    project: p\n    residency: CH\n"

func TestAPolicySetThroughTheAPIPlacesJobsOnEveryServerWithoutARestart(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	doc := loadOpenAPI(t)
	admin := e.token(queue.RoleAdmin, nil, queue.AllProjects)
	submit := e.token(queue.RoleSubmit, nil, "p")

	// A second server on the same database, with a config file policy
	// of its own: its placer follows the stored versions.
	provider, err := local.New(pools)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	other := &control.PolicyWatch{Store: e.Store, Interval: 50 * time.Millisecond,
		Config: policy.Rules{Rules: []policy.Rule{{Name: "config-rule", Project: "q"}}}}
	if err := other.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	go other.Run(ctx)
	otherPlacer := &control.PolicyPlacer{Sources: []adapters.OfferSource{provider}, Policy: other}

	r := e.do("GET", "/v1/policy", admin, "", nil)
	doc.check(t, "GET", "/v1/policy", r)
	var before httpapi.Policy
	r.json(t, &before)
	if r.Status != http.StatusOK || before.Source != "config" || before.Version != 0 || r.Header.Get("ETag") != `"0"` {
		t.Fatalf("before any version, the config file's policy is in effect: %d %s (ETag %s)", r.Status, r.Body, r.Header.Get("ETag"))
	}
	before1 := e.submit(submit, "command: [/bin/true]\n")
	e.waitState(submit, before1.ID, queue.StateSucceeded)

	r = e.do("PUT", "/v1/policy?comment=keep+p+in+CH", admin, "application/yaml", []byte(swissOnly), "If-Match", `"0"`)
	doc.check(t, "PUT", "/v1/policy", r)
	var set httpapi.Policy
	r.json(t, &set)
	if r.Status != http.StatusOK || set.Version != 1 || set.Source != "database" || set.Comment != "keep p in CH" || r.Header.Get("ETag") != `"1"` {
		t.Fatalf("PUT /v1/policy: %d %s", r.Status, r.Body)
	}

	job := e.submit(submit, "command: [/bin/true]\n")
	e.waitState(submit, job.ID, queue.StateRejected)
	var rejected queue.Job
	e.do("GET", "/v1/jobs/"+job.ID.String(), submit, "", nil).json(t, &rejected)
	if !strings.Contains(rejected.Reason, "outside residency CH") || !strings.Contains(rejected.Reason, "swiss-only") {
		t.Fatalf("the job must be rejected with the new rule's residency: %q", rejected.Reason)
	}

	queuetest.Eventually(t, 10*time.Second, "the second server to follow version 1", func() bool { return other.Current().Version == 1 })
	spec, err := queue.ParseSpec([]byte("project: p\ncommand: [/bin/true]\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = otherPlacer.Place(ctx, &queue.Job{ID: job.ID, Spec: spec, SubmittedAt: time.Now()}, nil)
	var refusal *queue.RejectionError
	if !errors.As(err, &refusal) || !strings.Contains(refusal.Reason, "swiss-only") {
		t.Fatalf("the second server's placer must refuse with the new rule: %v", err)
	}

	r = e.do("GET", "/v1/policy", admin, "", nil)
	doc.check(t, "GET", "/v1/policy", r)
	var now httpapi.Policy
	r.json(t, &now)
	rules, _ := now.Rules["rules"].([]any)
	if now.Version != 1 || now.SetBy == "" || now.SetAt == nil || len(rules) != 1 {
		t.Fatalf("GET after PUT: %s", r.Body)
	}
	r = e.do("GET", "/v1/policy/versions", admin, "", nil)
	doc.check(t, "GET", "/v1/policy/versions", r)
	var versions []httpapi.PolicyVersion
	r.json(t, &versions)
	if len(versions) != 1 || versions[0].Version != 1 || versions[0].Comment != "keep p in CH" {
		t.Fatalf("history: %s", r.Body)
	}
}

func TestABadPolicyIs422NamingTheKeyAndChangesNothing(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	doc := loadOpenAPI(t)
	admin := e.token(queue.RoleAdmin, nil, queue.AllProjects)
	if r := e.do("PUT", "/v1/policy", admin, "application/yaml", []byte(swissOnly)); r.Status != http.StatusOK {
		t.Fatalf("PUT: %d %s", r.Status, r.Body)
	}
	for _, tc := range []struct{ body, field string }{
		{"rules:\n  - name: x\n    residency: EUU\n", "body.rules[0].residency"},
		{"rules:\n  - name: x\n    residdency: EU\n", "body.rules[0].residdency"},
		{`{"budgets": [{"project": "p", "cap": "10 EUR", "period": "fortnight"}]}`, "body.budgets[0].period"},
		{"base_currency: euro\n", "body.base_currency"},
		{"exchange_rate: {USD: 0.9}\n", "body.exchange_rate"},
	} {
		r := e.do("PUT", "/v1/policy", admin, "application/yaml", []byte(tc.body))
		doc.check(t, "PUT", "/v1/policy", r)
		var problem struct {
			Errors []struct{ Location, Message string }
		}
		r.json(t, &problem)
		if r.Status != http.StatusUnprocessableEntity || r.Header.Get("Content-Type") != "application/problem+json" ||
			len(problem.Errors) != 1 || problem.Errors[0].Location != tc.field {
			t.Errorf("%q: %d %s, want 422 naming %s", tc.body, r.Status, r.Body, tc.field)
		}
	}
	r := e.do("PUT", "/v1/policy", admin, "application/yaml", bytes.Repeat([]byte("#"), control.MaxPolicyBytes+1))
	if r.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("an oversize policy: %d, want 413", r.Status)
	}
	// A comment is one line of text: a terminal escape in it would act on
	// the terminal of whoever lists the versions.
	for _, c := range []struct{ path, contentType, body string }{
		{"/v1/policy?comment=%1B%5B2J", "application/yaml", swissOnly},
		{"/v1/projects/p/budgets?comment=two%0Alines", "application/json", `{"budgets": []}`},
	} {
		r := e.do("PUT", c.path, admin, c.contentType, []byte(c.body))
		if r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), `"location":"query.comment"`) {
			t.Errorf("PUT %s: %d %s, want 422 naming query.comment", c.path, r.Status, r.Body)
		}
	}
	var p httpapi.Policy
	e.do("GET", "/v1/policy", admin, "", nil).json(t, &p)
	if p.Version != 1 || p.Comment != "" {
		t.Fatalf("refused documents must change nothing: %+v", p)
	}
	n, err := e.Store.PolicyVersionNumber(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("stored versions: %d %v", n, err)
	}
}

func TestPolicyNeedsAnAdminTokenForAllProjects(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	tokens := map[string]string{
		"read":          e.token(queue.RoleRead, nil, queue.AllProjects),
		"submit":        e.token(queue.RoleSubmit, nil, queue.AllProjects),
		"project admin": e.token(queue.RoleAdmin, nil, "p"),
	}
	for name, tok := range tokens {
		for _, op := range []struct{ method, path string }{{"GET", "/v1/policy"}, {"PUT", "/v1/policy"}, {"GET", "/v1/policy/versions"}} {
			if r := e.do(op.method, op.path, tok, "application/yaml", []byte(swissOnly)); r.Status != http.StatusForbidden {
				t.Errorf("%s %s with a %s token: %d %s, want 403", op.method, op.path, name, r.Status, r.Body)
			}
		}
	}
	for _, op := range []struct{ method, path string }{{"GET", "/v1/policy"}, {"PUT", "/v1/policy"}, {"GET", "/v1/policy/versions"},
		{"GET", "/v1/projects/p/budgets"}, {"PUT", "/v1/projects/p/budgets"}} {
		if r := e.do(op.method, op.path, "", "application/json", []byte(`{"budgets": []}`)); r.Status != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d, want 401", op.method, op.path, r.Status)
		}
	}
	if r := e.do("GET", "/v1/projects/p/budgets", e.token(queue.RoleSubmit, nil, "p"), "", nil); r.Status != http.StatusForbidden {
		t.Errorf("budgets with a submit token: %d, want 403", r.Status)
	}
	if n, err := e.Store.PolicyVersionNumber(context.Background()); err != nil || n != 0 {
		t.Fatalf("refused requests must set nothing: version %d %v", n, err)
	}
}

func TestAProjectAdminChangesItsOwnBudgetsOnly(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	doc := loadOpenAPI(t)
	global := e.token(queue.RoleAdmin, nil, queue.AllProjects)
	padmin := e.token(queue.RoleAdmin, nil, "p")
	submit := e.token(queue.RoleSubmit, nil, "p")
	base := "rules:\n  - name: keep\n    project: q\n    residency: EU\nbudgets:\n  - project: q\n    cap: 100 EUR\n    period: month\n  - project: '*'\n    cap: 1000 EUR\n    period: year\n"
	if r := e.do("PUT", "/v1/policy", global, "application/yaml", []byte(base)); r.Status != http.StatusOK {
		t.Fatalf("PUT: %d %s", r.Status, r.Body)
	}
	// A running job reserves its estimate (1 h at 0.10 EUR/h).
	running := e.submit(submit, "command: [sleep, '60']\nexpected_duration: 1h\n")
	e.waitState(submit, running.ID, queue.StateRunning)

	r := e.do("PUT", "/v1/projects/p/budgets?comment=p+monthly", padmin, "application/json", []byte(`{"budgets": [{"cap": "0.01 EUR", "period": "month"}]}`), "If-Match", `"1"`)
	doc.check(t, "PUT", "/v1/projects/{project}/budgets", r)
	var got httpapi.ProjectBudgets
	r.json(t, &got)
	if r.Status != http.StatusOK || got.Version != 2 || len(got.Budgets) != 1 || got.Budgets[0].Cap != "0.01 EUR" || len(got.Usage) != 2 {
		t.Fatalf("PUT budgets: %d %s", r.Status, r.Body)
	}
	for _, u := range got.Usage {
		if u.Reserved == "0.00 EUR" || u.Budget == "p" && !strings.HasPrefix(u.Remaining, "-") || u.Budget == "*" && u.Period != "year" {
			t.Errorf("the project's use of each budget must count the running job's reservation: %+v", u)
		}
	}
	r = e.do("GET", "/v1/projects/p/budgets", padmin, "", nil)
	doc.check(t, "GET", "/v1/projects/{project}/budgets", r)

	// The new budget is in effect: the next job of p is over it.
	job := e.submit(submit, "command: [/bin/true]\nexpected_duration: 1h\n")
	e.waitState(submit, job.ID, queue.StateRejected)

	var p httpapi.Policy
	e.do("GET", "/v1/policy", global, "", nil).json(t, &p)
	budgets, _ := p.Rules["budgets"].([]any)
	rules, _ := p.Rules["rules"].([]any)
	if len(budgets) != 3 || len(rules) != 1 {
		t.Fatalf("the rest of the policy must stay: %v", p.Rules)
	}

	if r := e.do("PUT", "/v1/projects/q/budgets", padmin, "application/json", []byte(`{"budgets": []}`)); r.Status != http.StatusNotFound {
		t.Errorf("another project's budgets: %d, want 404", r.Status)
	}
	if r := e.do("GET", "/v1/projects/q/budgets", padmin, "", nil); r.Status != http.StatusNotFound {
		t.Errorf("reading another project's budgets: %d, want 404", r.Status)
	}
	if r := e.do("PUT", "/v1/policy", padmin, "application/yaml", []byte(swissOnly)); r.Status != http.StatusForbidden {
		t.Errorf("a project admin setting the global policy: %d, want 403", r.Status)
	}
	r = e.do("PUT", "/v1/projects/p/budgets", padmin, "application/json", []byte(`{"budgets": [{"cap": "lots", "period": "month"}]}`))
	if r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), "body.budgets[0].cap") {
		t.Errorf("a bad cap: %d %s, want 422 naming body.budgets[0].cap", r.Status, r.Body)
	}
	r = e.do("PUT", "/v1/projects/p/budgets", padmin, "application/json", []byte(`{"budgets": [{"cap": "5 USD", "period": "month"}]}`))
	if r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), "currency") || !strings.Contains(string(r.Body), "body.budgets[0].cap") {
		t.Errorf("a cap in a currency without a rate: %d %s, want 422 naming body.budgets[0].cap", r.Status, r.Body)
	}
	if n, _ := e.Store.PolicyVersionNumber(context.Background()); n != 2 {
		t.Fatalf("refused budget changes must set nothing: version %d", n)
	}
}

func TestAChangeOnAnOldVersionIs412AndARaceIs409(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	doc := loadOpenAPI(t)
	admin := e.token(queue.RoleAdmin, nil, queue.AllProjects)
	if r := e.do("PUT", "/v1/policy", admin, "application/yaml", []byte(swissOnly), "If-Match", `"0"`); r.Status != http.StatusOK {
		t.Fatalf("PUT: %d %s", r.Status, r.Body)
	}
	r := e.do("PUT", "/v1/policy", admin, "application/yaml", []byte("{}"), "If-Match", `"0"`)
	doc.check(t, "PUT", "/v1/policy", r)
	if r.Status != http.StatusPreconditionFailed {
		t.Fatalf("a change made on version 0 while 1 is in effect: %d %s, want 412", r.Status, r.Body)
	}
	if r := e.do("PUT", "/v1/projects/p/budgets", admin, "application/json", []byte(`{"budgets": []}`), "If-Match", `"7"`); r.Status != http.StatusPreconditionFailed {
		t.Fatalf("budgets on an old version: %d %s, want 412", r.Status, r.Body)
	}
	if r := e.do("PUT", "/v1/policy", admin, "application/yaml", []byte("{}"), "If-Match", "soon"); r.Status != http.StatusUnprocessableEntity ||
		!strings.Contains(string(r.Body), "If-Match") {
		t.Fatalf("a malformed If-Match: %d %s, want 422 naming it", r.Status, r.Body)
	}
	// Two servers recording a version at the same moment: the store takes
	// one and refuses the other, which the API answers 409.
	watch := &control.PolicyWatch{Store: e.Store}
	results := make(chan error, 8)
	for range cap(results) {
		go func() {
			_, err := watch.SetPolicy(context.Background(), []byte("{}"), "yaml", "test", "", nil)
			results <- err
		}()
	}
	ok := 0
	for range cap(results) {
		err := <-results
		if err == nil {
			ok++
		} else if !errors.Is(err, queue.ErrPolicyChanged) {
			t.Fatalf("a racing change: %v, want queue.ErrPolicyChanged", err)
		}
	}
	versions, err := e.Store.PolicyVersions(context.Background(), 100)
	if err != nil || len(versions) != 1+ok || versions[0].Version != int64(1+ok) {
		t.Fatalf("versions after the race: %d ok, %d stored, %v", ok, len(versions), err)
	}
	if r := e.do("PUT", "/v1/policy", admin, "application/yaml", []byte("{}"), "If-Match", `"1"`); r.Status != http.StatusPreconditionFailed {
		t.Fatalf("If-Match after others changed it: %d, want 412", r.Status)
	}
}

// TestPolicyCommandsRoundTripThroughTheAPIAndTheDatabase drives gpuq
// policy set, show and history over HTTP and then over the database.
func TestPolicyCommandsRoundTripThroughTheAPIAndTheDatabase(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	admin := e.token(queue.RoleAdmin, nil, queue.AllProjects)
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(file, []byte(swissOnly), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("rules:\n  - name: x\n    residency: EUU\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gpuq := func(env []string, args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := cli.Main(append(args, env...), &out, &errOut)
		return out.String(), errOut.String(), code
	}
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte("token: "+admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	overHTTP := []string{"--url", e.URL, "--config", config}
	overDB := []string{"--database-url", e.DBURL, "--config", config}

	out, errOut, code := gpuq(overHTTP, "policy", "show")
	if code != 0 || !strings.Contains(out, "config file policy") {
		t.Fatalf("policy show before any version: %d %s %s", code, out, errOut)
	}
	if _, errOut, code := gpuq(overHTTP, "policy", "set", bad); code == 0 || !strings.Contains(errOut, "rules[0].residency") {
		t.Fatalf("policy set of a bad file must fail naming the key: %d %s", code, errOut)
	}
	if out, errOut, code := gpuq(overHTTP, "policy", "set", file, "--comment", "CH only", "--if-version", "0"); code != 0 || !strings.Contains(out, "version 1") {
		t.Fatalf("policy set: %d %s %s", code, out, errOut)
	}
	// On a version no longer in effect nothing changes, and the error says
	// which version is.
	if _, errOut, code := gpuq(overHTTP, "policy", "set", file, "--if-version", "0"); code == 0 ||
		!strings.Contains(errOut, "--if-version 0: version 1 is in effect, so nothing was changed") || !strings.Contains(errOut, "retry with --if-version 1") {
		t.Fatalf("policy set on an old version: %d %s", code, errOut)
	}
	shown, errOut, code := gpuq(overHTTP, "policy", "show")
	if code != 0 || !strings.Contains(shown, "# version 1") || !strings.Contains(shown, "residency: CH") {
		t.Fatalf("policy show: %d %s %s", code, shown, errOut)
	}
	// What show prints is a policy file that set takes back.
	again := filepath.Join(dir, "again.yaml")
	if err := os.WriteFile(again, []byte(shown), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := gpuq(overDB, "policy", "set", again, "--comment", "from the host"); code != 0 || !strings.Contains(out, "version 2") {
		t.Fatalf("policy set over the database: %d %s %s", code, out, errOut)
	}
	if _, errOut, code := gpuq(overDB, "policy", "set", again, "--if-version", "1"); code == 0 ||
		!strings.Contains(errOut, "--if-version 1: version 2 is in effect, so nothing was changed") {
		t.Fatalf("policy set over the database on an old version: %d %s", code, errOut)
	}
	// The API's server follows the version set on the host within its
	// polling interval.
	var viaHTTP, viaDB string
	queuetest.Eventually(t, 10*time.Second, "the API to serve version 2", func() bool {
		viaHTTP, _, _ = gpuq(overHTTP, "policy", "show", "-o", "json")
		return strings.Contains(viaHTTP, `"version": 2`)
	})
	viaDB, _, _ = gpuq(overDB, "policy", "show", "-o", "json")
	if viaHTTP != viaDB || !strings.Contains(viaDB, `"set_by": "cli"`) {
		t.Fatalf("-o json must be the same either way:\n%s\n%s", viaHTTP, viaDB)
	}
	hist, errOut, code := gpuq(overHTTP, "policy", "history")
	if code != 0 || !strings.Contains(hist, "CH only") || !strings.Contains(hist, "from the host") {
		t.Fatalf("policy history: %d %s %s", code, hist, errOut)
	}
	// Who set each version: the token by its name (and id), or the host.
	if !regexp.MustCompile(`(?m)^1 .* test \(token [0-9a-f-]{36}\) +CH only$`).MatchString(hist) || !regexp.MustCompile(`(?m)^2 .* cli +from the host$`).MatchString(hist) {
		t.Fatalf("policy history must name who set each version:\n%s", hist)
	}
	v, err := e.Store.PolicyVersion(context.Background())
	if err != nil || v.Version != 2 {
		t.Fatalf("stored: %+v %v", v, err)
	}
}

// A budget change made on the version this server last saw, after another
// server recorded a newer one it has not read yet, is 409: nothing is lost.
func TestABudgetChangeOnAStaleViewIs409(t *testing.T) {
	t.Parallel()
	e := startEnv(t, func(c *httpapi.Config) {
		c.Policy = &control.PolicyWatch{Store: c.Store, Interval: time.Hour} // never refreshed
	})
	doc := loadOpenAPI(t)
	admin := e.token(queue.RoleAdmin, nil, "p")
	if _, err := e.Store.SetPolicy(context.Background(), []byte(`{"rules": [{"name": "elsewhere", "residency": "EU"}]}`), "other server", "", nil); err != nil {
		t.Fatal(err)
	}
	r := e.do("PUT", "/v1/projects/p/budgets", admin, "application/json", []byte(`{"budgets": [{"cap": "10 EUR", "period": "month"}]}`))
	doc.check(t, "PUT", "/v1/projects/{project}/budgets", r)
	if r.Status != http.StatusConflict {
		t.Fatalf("a budget change on a stale view: %d %s, want 409", r.Status, r.Body)
	}
	v, err := e.Store.PolicyVersion(context.Background())
	if err != nil || v.Version != 1 || v.SetBy != "other server" {
		t.Fatalf("the other server's version must stay in effect: %+v %v", v, err)
	}
}

// A project's admin shows and sets the project's budgets with gpuq budget,
// through the API; the control-plane host does the same through the
// database, and -o json is the API's document either way.
func TestBudgetCommandsShowAndSetAProjectsBudgetsThroughTheAPIAndTheDatabase(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	global := e.token(queue.RoleAdmin, nil, queue.AllProjects)
	padmin := e.token(queue.RoleAdmin, nil, "p")
	submit := e.token(queue.RoleSubmit, nil, "p")
	if r := e.do("PUT", "/v1/policy", global, "application/yaml", []byte("budgets:\n  - {project: 'p*', cap: 1000 EUR, period: year}\n")); r.Status != http.StatusOK {
		t.Fatalf("PUT: %d %s", r.Status, r.Body)
	}
	dir := t.TempDir()
	configWith := func(token string) string {
		f := filepath.Join(dir, strings.ReplaceAll(token, "_", "")[:20]+".yaml")
		if err := os.WriteFile(f, []byte("token: "+token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	gpuq := runCLI
	asAdmin := []string{"--url", e.URL, "--config", configWith(padmin)}
	overDB := []string{"--database-url", e.DBURL, "--config", configWith(global)}

	out, errOut, code := gpuq(append([]string{"budget", "set", "--project", "p", "--month", "500 EUR", "--total", "2000 EUR", "--comment", "grant"}, asAdmin...)...)
	if code != 0 || !strings.Contains(out, "policy version 2 is in effect") ||
		!regexp.MustCompile(`(?m)^p +month +\d{4}-\d\d-01 +500\.00 EUR +0\.00 EUR +0\.00 EUR +500\.00 EUR$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^p +total +- +2000\.00 EUR +0\.00 EUR +0\.00 EUR +2000\.00 EUR$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^p\* +year `).MatchString(out) {
		t.Fatalf("budget set by the project's admin: %d\n%s%s", code, out, errOut)
	}
	var p httpapi.Policy
	e.do("GET", "/v1/policy", global, "", nil).json(t, &p)
	if budgets, _ := p.Rules["budgets"].([]any); len(budgets) != 3 || p.Comment != "grant" {
		t.Fatalf("the glob's budget must stay beside p's two: %v", p.Rules)
	}
	viaAPI, errOut, code := gpuq(append([]string{"budget", "show", "--project", "p", "-o", "json"}, asAdmin...)...)
	if code != 0 {
		t.Fatalf("budget show: %d %s", code, errOut)
	}
	viaDB, errOut, code := gpuq(append([]string{"budget", "show", "--project", "p", "-o", "json"}, overDB...)...)
	if code != 0 || viaDB != viaAPI {
		t.Fatalf("budget show -o json must be the same either way: %d %s\n%s\n%s", code, errOut, viaAPI, viaDB)
	}

	// Refusals change nothing and name the flag.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--week", "5 GBP"}, `--week: unknown currency "GBP"`},
		{[]string{"--week", "lots"}, "--week:"},
		{[]string{"--week", "5 EUR", "--none"}, "--none removes every budget"},
		{nil, "give a cap for at least one period"},
		{[]string{"--month", "5 EUR", "--if-version", "1"}, "--if-version 1: version 2 is in effect, so nothing was changed; see gpuq budget show --project p"},
	} {
		if _, errOut, code := gpuq(append(append([]string{"budget", "set", "--project", "p"}, c.args...), asAdmin...)...); code == 0 || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "body.") {
			t.Errorf("budget set %v: %d %s, want %q", c.args, code, errOut, c.want)
		}
	}
	if _, errOut, code := gpuq(append([]string{"budget", "set", "--project", "q", "--month", "5 EUR"}, asAdmin...)...); code != cli.ExitNotFound || !strings.Contains(errOut, "project q not found") {
		t.Errorf("another project's budgets: %d %s", code, errOut)
	}
	if _, errOut, code := gpuq("budget", "set", "--project", "p", "--month", "5 EUR", "--url", e.URL, "--config", configWith(submit)); code == 0 || !strings.Contains(errOut, "403") {
		t.Errorf("a submitter setting budgets: %d %s", code, errOut)
	}
	if n, _ := e.Store.PolicyVersionNumber(context.Background()); n != 2 {
		t.Fatalf("refused budget changes must set nothing: version %d", n)
	}

	// On the control-plane host, through the database.
	out, errOut, code = gpuq(append([]string{"budget", "set", "--project", "p", "--none"}, overDB...)...)
	if code != 0 || !strings.Contains(out, "policy version 3 is in effect") || strings.Contains(out, "month") || !strings.Contains(out, "p*") {
		t.Fatalf("budget set --none over the database: %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := gpuq(append([]string{"budget", "set", "--project", "p", "--day", "1 EUR", "--if-version", "2"}, overDB...)...); code == 0 ||
		!strings.Contains(errOut, "--if-version 2: version 3 is in effect") {
		t.Errorf("budget set over the database on an old version: %d %s", code, errOut)
	}
	out, _, code = gpuq(append([]string{"budget", "show", "--project", "other"}, overDB...)...)
	if code != 0 || out != "no budget applies to project other (policy version 3)\n" {
		t.Errorf("budget show of a project no budget applies to: %d %q", code, out)
	}
}
