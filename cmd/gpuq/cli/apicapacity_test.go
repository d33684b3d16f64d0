package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/workers"
)

// sameJSON reports whether two JSON documents are equal, leaving out the
// top-level keys in skip (the time a report was made).
func sameJSON(t *testing.T, a, b []byte, skip ...string) bool {
	t.Helper()
	norm := func(data []byte) string {
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, data)
		}
		if m, ok := v.(map[string]any); ok {
			for _, k := range skip {
				delete(m, k)
			}
		}
		out, _ := json.Marshal(v)
		return string(out)
	}
	return norm(a) == norm(b)
}

func TestCapacityAndTokenCommandsGoThroughTheHTTPAPIWithoutADatabaseURL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gpuq and runs it as a user does")
	}
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	announcer := &control.InstanceAnnouncer{Store: s, JS: n.JS}
	ts, secret := serveAPI(ctx, t, n, s, queue.RoleAdmin)
	// Two instances that ran and ended, so that their cost is fixed.
	launched := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	for _, id := range []string{"gq-od1", "gq-spot1"} {
		pool := strings.TrimSuffix(strings.TrimPrefix(id, "gq-"), "1")
		if _, err := s.RecordInstance(ctx, queue.NewInstance{ID: id, Provider: "sim", Pool: pool, Project: "default", ClientToken: id,
			Slots: 1, PriceMicros: 360_000, Currency: "EUR", Billing: queue.BillPerSecond}); err != nil {
			t.Fatal(err)
		}
		ended := launched.Add(30 * time.Minute)
		for _, c := range []queue.InstanceChange{
			{ID: id, From: []queue.InstanceState{queue.InstanceRequested}, To: queue.InstancePending, ProviderID: "p-" + id, LaunchedAt: &launched},
			{ID: id, From: []queue.InstanceState{queue.InstancePending}, To: queue.InstanceTerminated, EndedAt: &ended, Reason: "idle for 5m0s"},
		} {
			if _, err := s.ChangeInstance(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}

	api := func(path string) []byte {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, res.StatusCode, b)
		}
		return b
	}
	bin := buildGpuq(t)
	home := t.TempDir() // no .gpuq/config.yaml here
	// A laptop's shell: the API's URL and a token, no database or NATS.
	env := []string{"GPUQ_URL=" + ts.URL, "GPUQ_TOKEN=" + secret}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GPUQ_") && !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	gpuqEnv := func(env []string, wantCode int, args ...string) []byte {
		t.Helper()
		return runBinary(t, bin, home, env, wantCode, args...)
	}
	gpuq := func(wantCode int, args ...string) []byte { t.Helper(); return gpuqEnv(env, wantCode, args...) }

	if out := gpuq(0, "instances", "-o", "json"); !sameJSON(t, out, api("/v1/instances")) || !bytes.Contains(out, []byte("gq-spot1")) {
		t.Fatalf("instances -o json is not the API's document:\n%s", out)
	}
	if out := gpuq(0, "instances", "--pool", "od", "--state", "terminated", "-o", "json"); !sameJSON(t, out, api("/v1/instances?pool=od&state=terminated")) ||
		bytes.Contains(out, []byte("gq-spot1")) {
		t.Fatalf("instances --pool od:\n%s", out)
	}
	if out := gpuq(0, "instances"); !bytes.Contains(out, []byte("gq-od1")) || !bytes.Contains(out, []byte("idle for 5m0s")) {
		t.Fatalf("instances table:\n%s", out)
	}
	since := launched.Add(-time.Hour).UTC().Format(time.RFC3339)
	out := gpuq(0, "spend", "--since", since, "-o", "json")
	if !sameJSON(t, out, api("/v1/spend?since="+since), "at") {
		t.Fatalf("spend -o json is not the API's document:\n%s\nAPI:\n%s", out, api("/v1/spend?since="+since))
	}
	var rep control.SpendReport
	if err := json.Unmarshal(out, &rep); err != nil || len(rep.Totals) != 1 || rep.Totals[0].Micros != 2*180_000 || rep.Totals[0].IdleMicros != rep.Totals[0].Micros {
		t.Fatalf("spend: two half hours at 0.36 EUR/h, all idle: %+v %v", rep, err)
	}
	if out := gpuq(0, "spend", "--since", since); !bytes.Contains(out, []byte("idle")) || !bytes.Contains(out, []byte("spot")) {
		t.Fatalf("spend table:\n%s", out)
	}
	if out := gpuq(0, "spend", "--project", "default", "--since", since, "-o", "json"); !sameJSON(t, out, api("/v1/projects/default/spend?since="+since)) {
		t.Fatalf("spend --project -o json is not the API's document:\n%s", out)
	}
	if out := gpuq(ExitNotFound, "spend", "--project", "other", "--since", since); !bytes.Contains(out, []byte("project other not found")) {
		t.Fatalf("another project's spend:\n%s", out)
	}

	// Tokens: made, listed as the API lists them, revoked.
	var created httpapi.CreatedToken
	if err := json.Unmarshal(gpuq(0, "token", "create", "--project", "default", "--role", "read", "--name", "dash", "-o", "json"), &created); err != nil ||
		!strings.HasPrefix(created.Token, "gpuq_") || created.Record == nil || created.Record.Name != "dash" {
		t.Fatalf("token create -o json: %+v %v", created, err)
	}
	if out := gpuq(ExitGeneral, "token", "create", "--project", "default", "--role", "owner"); !bytes.Contains(out, []byte("--role")) {
		t.Fatalf("a bad role must name --role:\n%s", out)
	}
	if out := gpuq(0, "token", "list", "-o", "json"); !sameJSON(t, out, api("/v1/tokens")) || !bytes.Contains(out, []byte(created.Record.ID.String())) ||
		bytes.Contains(out, []byte(created.Token)) {
		t.Fatalf("token list -o json is not the API's document (without secrets):\n%s", out)
	}
	gpuq(0, "token", "revoke", created.Record.ID.String())
	if _, err := s.TokenByPrefix(ctx, created.Record.Prefix); err != nil {
		t.Fatal(err)
	}
	if out := gpuq(ExitNotFound, "token", "revoke", uuid.NewString()); !bytes.Contains(out, []byte("not found")) {
		t.Fatalf("revoking no token:\n%s", out)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/v1/jobs", nil)
	req.Header.Set("Authorization", "Bearer "+created.Token)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the revoked token: %v %v, want 401", res, err)
	}

	// A token without the admin role is refused; without a token, the
	// message says where one comes from.
	readSecret, readTok, _ := queue.NewTokenSecret("r", []string{"default"}, queue.RoleRead, nil)
	if _, err := s.CreateToken(ctx, readTok); err != nil {
		t.Fatal(err)
	}
	readEnv := append(append([]string{}, env...), "GPUQ_TOKEN="+readSecret)
	if out := gpuqEnv(readEnv, ExitGeneral, "instances"); !bytes.Contains(out, []byte("HTTP 403")) {
		t.Fatalf("a read token listing instances:\n%s", out)
	}
	noToken := []string{"GPUQ_URL=" + ts.URL}
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GPUQ_") {
			noToken = append(noToken, kv)
		}
	}
	if out := gpuqEnv(noToken, ExitGeneral, "spend"); !bytes.Contains(out, []byte("GPUQ_TOKEN")) {
		t.Fatalf("no token:\n%s", out)
	}

	// --watch follows the announced events, one document a line.
	watch := exec.Command(bin, "instances", "--watch", "-o", "json")
	watch.Dir, watch.Env = home, env
	stdout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var watchErr bytes.Buffer
	watch.Stderr = &watchErr
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// Events are announced until the watcher, once connected, hears one.
	if _, err := s.RecordInstance(ctx, queue.NewInstance{ID: "gq-new", Provider: "sim", Pool: "od", ClientToken: "gq-new",
		Slots: 1, PriceMicros: 1, Currency: "EUR", Billing: queue.BillPerSecond, Message: "3 jobs waiting"}); err != nil {
		t.Fatal(err)
	}
	var line string
	deadline := time.After(20 * time.Second)
	for line == "" {
		if _, err := announcer.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case l := <-lines:
			// Events recorded earlier in the test (gq-od1's) are
			// announced by the same pass, and heard when the watcher
			// connected in time.
			var ev queue.InstanceEvent
			if json.Unmarshal([]byte(l), &ev) != nil || ev.InstanceID == "gq-new" {
				line = l
			}
		case <-time.After(300 * time.Millisecond):
			// Not connected yet when it was announced: announce another.
			if _, err := s.DB.ExecContext(ctx, `INSERT INTO instance_events (instance_id, state, message) VALUES ('gq-new', 'requested', 'again')`); err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatalf("instances --watch printed nothing:\n%s", watchErr.String())
		}
	}
	var ev queue.InstanceEvent
	if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.InstanceID != "gq-new" || ev.Pool != "od" || ev.State != queue.InstanceRequested {
		t.Fatalf("instances --watch line %q: %+v %v", line, ev, err)
	}
	recorded, err := s.InstanceEvents(ctx, "gq-new")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range recorded {
		if b, _ := json.Marshal(r); string(b) == line {
			found = true
		}
	}
	if !found {
		t.Fatalf("instances --watch printed %s, not one of the recorded events %+v", line, recorded)
	}
	if err := watch.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := watch.Wait(); err != nil {
		t.Fatalf("instances --watch interrupted: %v\n%s", err, watchErr.String())
	}
}

// serveAPI serves the HTTP API on n and s until the test ends, and returns
// its server and a token of role for the project default. Tokens' last use
// is not written during the test, so that listings stay the same between
// the API and the CLI.
func serveAPI(ctx context.Context, t *testing.T, n *queuetest.NATS, s *store.Store, role queue.Role) (*httptest.Server, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	srv, err := httpapi.New(httpapi.Config{Store: s, JS: n.JS, NATS: n.NC, Archives: &workers.ObjectStore{JS: n.JS},
		RatePerSecond: 1000, Burst: 1000, TouchEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { cancel(); ts.CloseClientConnections(); ts.Close() })
	secret, tok, err := queue.NewTokenSecret("laptop", []string{"default"}, role, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	return ts, secret
}
