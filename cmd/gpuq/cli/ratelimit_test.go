package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
)

// A sweep submitted from a shell loop, then cancelled and waited for by its
// label, goes over the token's rate limit of gpuq dev (50 requests a
// second, bursts of 100): each command slows down to the limit instead of
// failing halfway with a 429.
func TestASweepOverTheTokensRateLimitSlowsDownInsteadOfFailing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes")
	}
	t.Parallel()
	_, config := startDevHere(t)
	const n = 150
	for i := range n {
		_, errOut, err := runCLI(t, "submit", "--config", config, "--no-wait-accept", "--label", "sweep=rate", "--label", fmt.Sprintf("i=%d", i), "--", "sleep", "300")
		if err != nil {
			t.Fatalf("submission %d of the sweep: %v\n%s", i+1, err, errOut)
		}
	}
	out, errOut, err := runCLI(t, "cancel", "--config", config, "--label", "sweep=rate")
	if err != nil {
		t.Fatalf("cancel --label: %v\n%s", err, errOut)
	}
	if got := strings.Count(out, " cancelled\n"); got != n {
		t.Fatalf("cancel --label: want %d jobs cancelled, got %d:\n%s\n%s", n, got, out, errOut)
	}
	out, _, err = runCLI(t, "wait", "--config", config, "--label", "sweep=rate")
	if exitCode(err) != ExitCancelled || strings.Count(out, " cancelled\n") != n {
		t.Fatalf("wait --label of a cancelled sweep: want exit %d and %d jobs, got %v\n%s", ExitCancelled, n, err, out)
	}
}

// The HTTP client sends a request refused with 429 again after its
// Retry-After, whatever its method and with its body, and a GET answered
// 503 again for a while; a POST answered 503 is not sent again, since the
// server may have acted on it. A GET whose context ends while it is sent
// again returns the 503, not the context's error.
func TestTheAPIClientWaitsOutTheRateLimitAndAsksAGetAgainWhileUnavailable(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string][]string{} // each request's body, by method and path
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		key := r.Method + " " + r.URL.Path
		seen[key] = append(seen[key], string(body))
		n := len(seen[key])
		mu.Unlock()
		switch {
		case r.URL.Path == "/v1/down" && n >= 2:
			// Still down, and this time slow to say so: the caller's
			// context ends while the request is on its way.
			<-r.Context().Done()
			w.WriteHeader(http.StatusServiceUnavailable)
		case r.URL.Path == "/v1/limited" && n <= 2:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
		case r.URL.Path == "/v1/restarting" && n <= 2, r.URL.Path == "/v1/down", r.URL.Path == "/v1/jobs" && n <= 2:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			fmt.Fprint(w, `{"ok": true}`)
		}
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL)
	var stderr strings.Builder
	a := &apiJobs{base: base, token: "t", http: srv.Client(), stderr: &stderr}
	ctx := context.Background()
	var out struct{ OK bool }

	if err := a.call(ctx, http.MethodPost, "/v1/limited", nil, strings.NewReader(`{"n": 1}`), "application/json", &out); err != nil || !out.OK {
		t.Fatalf("a POST refused twice with 429: %v", err)
	}
	if got := strings.Join(seen["POST /v1/limited"], ","); got != `{"n": 1},{"n": 1},{"n": 1}` {
		t.Errorf("the POST was sent as %q, want three times with its body", got)
	}
	if err := a.call(ctx, http.MethodGet, "/v1/restarting", nil, nil, "", &out); err != nil {
		t.Fatalf("a GET answered 503 twice: %v", err)
	}
	if len(seen["GET /v1/restarting"]) != 3 || strings.Count(stderr.String(), "trying again") != 1 {
		t.Errorf("the GET was sent %d times with stderr %q; want 3 and one line", len(seen["GET /v1/restarting"]), stderr.String())
	}
	err := a.call(ctx, http.MethodPost, "/v1/restarting", nil, strings.NewReader("{}"), "application/json", &out)
	var p *APIError
	if !errors.As(err, &p) || p.Status != http.StatusServiceUnavailable || len(seen["POST /v1/restarting"]) != 1 {
		t.Errorf("a POST answered 503: want the 503 after one request, got %v after %d", err, len(seen["POST /v1/restarting"]))
	}
	// A submission with an idempotency key names the same job however
	// often it arrives, so it is sent again; one without is not.
	spec, err := queue.ParseSpec([]byte(`{"command": ["true"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Submit(ctx, spec); !errors.As(err, &p) || p.Status != http.StatusServiceUnavailable || len(seen["POST /v1/jobs"]) != 1 {
		t.Errorf("a submission without an idempotency key answered 503: want the 503 after one request, got %v after %d", err, len(seen["POST /v1/jobs"]))
	}
	spec.IdempotencyKey = "run-7"
	if _, err := a.Submit(ctx, spec); err != nil || len(seen["POST /v1/jobs"]) != 3 || seen["POST /v1/jobs"][2] != seen["POST /v1/jobs"][1] {
		t.Errorf("a submission with an idempotency key answered 503 once: want it sent again, got %v after %d", err, len(seen["POST /v1/jobs"]))
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := a.call(short, http.MethodGet, "/v1/down", nil, nil, "", &out); !errors.As(err, &p) || p.Status != http.StatusServiceUnavailable {
		t.Errorf("a GET of a server that stays down: want its 503 once the context ends, got %v", err)
	}

	for header, want := range map[string]time.Duration{
		"": time.Second, "0": time.Second, "3": 3 * time.Second, "3600": time.Minute, "soon": time.Second,
		time.Now().Add(10 * time.Second).UTC().Format(http.TimeFormat): 10 * time.Second,
	} {
		if got := retryAfter(header); got < want-time.Second || got > want {
			t.Errorf("Retry-After %q: %s, want %s", header, got, want)
		}
	}
}
