package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/sql/pgtest"
	"github.com/gpuq/gpuq/workers"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// env is a real API server over a real control plane: embedded JetStream,
// a private PostgreSQL database, the scheduler and one worker of a local
// pool in Germany.
type env struct {
	t     testing.TB
	URL   string
	DBURL string
	Store *store.Store
	NATS  *queuetest.NATS
	srv   *httpapi.Server
}

// pools is the one local pool the env's worker serves.
var pools = []local.PoolConfig{{Pool: "de-cpu", Region: "eu-local-1", Country: "DE", Card: "cpu", VCPU: 64, MemoryGB: 256,
	Tier: "on-demand", PricePerHour: "0.10", Currency: "EUR"}}

func startEnv(t testing.TB, tweak func(*httpapi.Config)) *env {
	t.Helper()
	n := queuetest.StartNATS(t)
	_, url := queuetest.Store(t, n)
	return startEnvOn(t, n, url, tweak)
}

// startEnvOn is startEnv on a given JetStream and database.
func startEnvOn(t testing.TB, n *queuetest.NATS, dbURL string, tweak func(*httpapi.Config)) *env {
	t.Helper()
	st, err := store.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	st.Events = &queue.EventPublisher{NATS: n.NC}
	provider, err := local.New(pools)
	if err != nil {
		t.Fatal(err)
	}
	sources := []adapters.OfferSource{provider}
	ctx, cancel := context.WithCancel(context.Background())
	// The placer and the API share the policy in effect, as in gpuq server.
	watch := &control.PolicyWatch{Store: st, Interval: 100 * time.Millisecond}
	if err := watch.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	go watch.Run(ctx)
	placer := &control.PolicyPlacer{Sources: sources, Spend: st.Spend, Policy: watch}
	errc := (&control.Plane{JS: n.JS, Store: st, Placer: placer}).Start(ctx)
	w, err := workers.New(workers.Config{Pool: "de-cpu", Slots: 4, Region: "eu-local-1", Country: "DE", DataDir: t.TempDir(), NodeID: "node-1"},
		n.NC, n.JS, st, &workers.ObjectStore{JS: n.JS})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.Run(ctx) }() //nolint:errcheck // ends with ctx
	cfg := httpapi.Config{Store: st, JS: n.JS, NATS: n.NC, Archives: &workers.ObjectStore{JS: n.JS}, Sources: sources,
		Policy: watch, RatePerSecond: 1000, Burst: 1000, Placer: placer, Runs: n.JS,
		Workdirs: &control.Workdirs{Store: &workers.ObjectStore{JS: n.JS}},
		// The tests' webhooks listen on loopback addresses.
		Webhooks: &control.Notifier{Store: st, AllowPrivateAddresses: true}}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		cancel()
		ts.CloseClientConnections()
		ts.Close()
		wg.Wait()
		for range 3 {
			<-errc
		}
	})
	return &env{t: t, URL: ts.URL, DBURL: dbURL, Store: st, NATS: n, srv: srv}
}

// token creates a token and returns its secret.
func (e *env) token(role queue.Role, expires *time.Time, projects ...string) string {
	e.t.Helper()
	secret, tok, err := queue.NewTokenSecret("test", projects, role, expires)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.Store.CreateToken(context.Background(), tok); err != nil {
		e.t.Fatal(err)
	}
	return secret
}

// response is an answer read whole.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decoding %s: %v", r.Body, err)
	}
}

// do sends a request with token (none when empty) and reads the answer.
func (e *env) do(method, path, token, contentType string, body []byte, header ...string) *response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.URL+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return &response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// submit posts a YAML spec and returns the job it answered with.
func (e *env) submit(token, spec string) *queue.Job {
	e.t.Helper()
	r := e.do("POST", "/v1/jobs", token, "application/yaml", []byte(spec))
	if r.Status != http.StatusCreated {
		e.t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	var j queue.Job
	r.json(e.t, &j)
	return &j
}

// waitState polls the API until the job is in state.
func (e *env) waitState(token string, id uuid.UUID, state queue.JobState) {
	e.t.Helper()
	queuetest.Eventually(e.t, 30*time.Second, "job "+id.String()+" to be "+string(state), func() bool {
		var j queue.Job
		r := e.do("GET", "/v1/jobs/"+id.String(), token, "", nil)
		r.json(e.t, &j)
		return j.State == state
	})
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	ID, Event, Data string
}

// events reads Server-Sent Events from path until the stream ends, stop
// returns true, or the timeout passes.
func (e *env) events(path, token string, header []string, timeout time.Duration, stop func(sseEvent) bool) []sseEvent {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(res.Body)
		e.t.Fatalf("GET %s: %d %s %s", path, res.StatusCode, res.Header.Get("Content-Type"), b)
	}
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Data != "" {
				out = append(out, cur)
				if stop != nil && stop(cur) {
					return out
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.ID = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.Event = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.Data = line[6:]
		}
	}
	return out
}

// openAPI is the checked-in document, for validating answers against it.
type openAPI struct {
	doc      map[string]any
	compiler *jsonschema.Compiler
	mu       sync.Mutex
}

const docURL = "mem:///openapi.json"

func loadOpenAPI(t testing.TB) *openAPI {
	t.Helper()
	b, err := os.ReadFile("../../../api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(docURL, doc); err != nil {
		t.Fatal(err)
	}
	return &openAPI{doc: doc.(map[string]any), compiler: c}
}

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// check validates an answer to the operation at (method, template) against
// the document: its status must be documented (or fall to "default") and
// its JSON body must match the schema.
func (o *openAPI) check(t testing.TB, method, template string, r *response) {
	t.Helper()
	op, ok := o.doc["paths"].(map[string]any)[template].(map[string]any)[strings.ToLower(method)].(map[string]any)
	if !ok {
		t.Fatalf("%s %s is not in the OpenAPI document", method, template)
	}
	key := strconv.Itoa(r.Status)
	responses := op["responses"].(map[string]any)
	if _, ok := responses[key]; !ok {
		key = "default"
		if _, ok := responses[key]; !ok {
			t.Fatalf("%s %s: status %d is not documented", method, template, r.Status)
		}
	}
	ct := r.Header.Get("Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	if len(r.Body) == 0 {
		return
	}
	content, _ := responses[key].(map[string]any)["content"].(map[string]any)
	if _, ok := content[ct]; !ok {
		t.Fatalf("%s %s: %d answered %s, which is not documented", method, template, r.Status, ct)
	}
	if ct != "application/json" && ct != "application/problem+json" {
		return
	}
	ptr := "#/paths/" + pointerEscape(template) + "/" + strings.ToLower(method) + "/responses/" + key + "/content/" + pointerEscape(ct) + "/schema"
	o.mu.Lock()
	sch, err := o.compiler.Compile(docURL + ptr)
	o.mu.Unlock()
	if err != nil {
		t.Fatalf("compiling %s: %v", ptr, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.Body))
	if err != nil {
		t.Fatalf("%s %s: body is not JSON: %v", method, template, err)
	}
	if err := sch.Validate(v); err != nil {
		t.Fatalf("%s %s: %d answer does not match the document: %v\n%s", method, template, r.Status, err, r.Body)
	}
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func itoa[T ~int | ~uint64](n T) string { return strconv.FormatUint(uint64(n), 10) }

// problemAt fails t unless r is problem details with one error, at
// location, whose message holds message.
func problemAt(t *testing.T, r *response, location, message string) {
	t.Helper()
	var p struct {
		Errors []struct{ Location, Message string }
	}
	r.json(t, &p)
	if len(p.Errors) != 1 || p.Errors[0].Location != location || !strings.Contains(p.Errors[0].Message, message) {
		t.Fatalf("want one problem at %s saying %q: %s", location, message, r.Body)
	}
}
