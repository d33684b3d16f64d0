package noticetest

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// GCP is a fake Compute Engine metadata server for the instance keys
// preempted (FALSE/TRUE) and maintenance-event (NONE, …). Requests without
// Metadata-Flavor: Google are refused with 403; answers carry
// Metadata-Flavor: Google and an ETag. wait_for_change=true hangs until the
// value changes, returning at once when last_etag is not the current ETag,
// and gives the unchanged value after timeout_sec. Assumed: an unknown key
// is 404 and an ETag is the value's version counter (the real server's is
// an opaque hash).
type GCP struct {
	*httptest.Server

	mu      sync.Mutex
	values  map[string]string
	version map[string]int
	changed chan struct{}
}

// NewGCP starts a fake metadata server with preempted FALSE and
// maintenance-event NONE, closed when the test ends.
func NewGCP(t testing.TB) *GCP {
	g := &GCP{values: map[string]string{"preempted": "FALSE", "maintenance-event": "NONE"},
		version: map[string]int{}, changed: make(chan struct{})}
	g.Server = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.Close)
	return g
}

// Set changes an instance key's value, waking the readers waiting on it.
func (g *GCP) Set(key, value string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.values[key] = value
	g.version[key]++
	close(g.changed)
	g.changed = make(chan struct{})
}

func (g *GCP) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Metadata-Flavor") != "Google" {
		http.Error(w, "Missing Metadata-Flavor:Google header.", http.StatusForbidden)
		return
	}
	key, ok := strings.CutPrefix(r.URL.Path, "/computeMetadata/v1/instance/")
	if !ok || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	timeout := 24 * time.Hour
	if s, err := strconv.Atoi(q.Get("timeout_sec")); err == nil && s > 0 {
		timeout = time.Duration(s) * time.Second
	}
	deadline := time.After(timeout)
	wait := q.Get("wait_for_change") == "true"
	since := q.Get("last_etag")
	for {
		g.mu.Lock()
		value, known := g.values[key]
		etag := strconv.Itoa(g.version[key])
		changed := g.changed
		g.mu.Unlock()
		if !known {
			http.NotFound(w, r)
			return
		}
		if since == "" {
			since = etag
		}
		if wait && etag == since {
			select {
			case <-changed:
				continue
			case <-deadline:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Metadata-Flavor", "Google")
		w.Header().Set("ETag", etag)
		w.Header().Set("Content-Type", "application/text")
		w.Write([]byte(value)) //nolint:errcheck // the client may be gone
		return
	}
}
