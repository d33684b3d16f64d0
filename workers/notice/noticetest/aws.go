package noticetest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// AWS is a fake EC2 instance metadata service answering IMDSv2 only:
// PUT /latest/api/token with X-aws-ec2-metadata-token-ttl-seconds (1–21600)
// returns a session token; every GET must carry it in
// X-aws-ec2-metadata-token (401 otherwise, as with IMDSv1 disabled).
// spot/instance-action and events/recommendations/rebalance are 404 until
// announced, then JSON as documented.
type AWS struct {
	*httptest.Server

	mu        sync.Mutex
	tokens    map[string]time.Time
	action    []byte
	rebalance []byte
	actionGot time.Time
}

// NewAWS starts a fake IMDS, closed when the test ends.
func NewAWS(t testing.TB) *AWS {
	a := &AWS{tokens: map[string]time.Time{}}
	a.Server = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.Close)
	return a
}

// Interrupt schedules a spot interruption: action is terminate, stop or
// hibernate; at is when EC2 will act (two minutes ahead for a real notice).
func (a *AWS) Interrupt(action string, at time.Time) {
	body, _ := json.Marshal(map[string]string{"action": action, "time": at.UTC().Format(time.RFC3339)})
	a.mu.Lock()
	defer a.mu.Unlock()
	a.action = body
}

// Rebalance publishes a rebalance recommendation noticed at t.
func (a *AWS) Rebalance(t time.Time) {
	body, _ := json.Marshal(map[string]string{"noticeTime": t.UTC().Format(time.RFC3339)})
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rebalance = body
}

// ExpireTokens invalidates every session token issued so far.
func (a *AWS) ExpireTokens() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.tokens)
}

// ActionRead is when the instance-action notice was first served; zero
// until then.
func (a *AWS) ActionRead() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.actionGot
}

func (a *AWS) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.URL.Path == "/latest/api/token" {
		if r.Method != http.MethodPut {
			http.Error(w, "", http.StatusMethodNotAllowed)
			return
		}
		ttl, err := strconv.Atoi(r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
		if err != nil || ttl < 1 || ttl > 21600 {
			http.Error(w, "", http.StatusBadRequest)
			return
		}
		b := make([]byte, 16)
		rand.Read(b) //nolint:errcheck // never fails
		token := hex.EncodeToString(b)
		a.tokens[token] = time.Now().Add(time.Duration(ttl) * time.Second)
		w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", strconv.Itoa(ttl))
		w.Write([]byte(token)) //nolint:errcheck // the client may be gone
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "", http.StatusMethodNotAllowed)
		return
	}
	if exp, ok := a.tokens[r.Header.Get("X-aws-ec2-metadata-token")]; !ok || time.Now().After(exp) {
		http.Error(w, "", http.StatusUnauthorized)
		return
	}
	var body []byte
	switch r.URL.Path {
	case "/latest/meta-data/spot/instance-action":
		body = a.action
		if body != nil && a.actionGot.IsZero() {
			a.actionGot = time.Now()
		}
	case "/latest/meta-data/events/recommendations/rebalance":
		body = a.rebalance
	}
	if body == nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Write(body) //nolint:errcheck // the client may be gone
}
