package noticetest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// AzureEvent is one scheduled event as the Scheduled Events document lists
// it.
type AzureEvent struct {
	EventId           string
	EventStatus       string
	EventType         string
	ResourceType      string
	Resources         []string
	NotBefore         string
	Description       string
	EventSource       string
	DurationInSeconds int
}

// Azure is a fake Azure Instance Metadata Service for Scheduled Events:
// GET /metadata/scheduledevents?api-version=… (Metadata: true required, 400
// without it or without api-version) returns {DocumentIncarnation, Events};
// POST with {"StartRequests":[{"EventId":…}]} starts those events, which
// then leave the document. GET /metadata/instance/compute/name?format=text
// returns the VM's name. Assumed: a start of an unknown event id is
// accepted and ignored.
type Azure struct {
	*httptest.Server
	// Name of the VM the watcher runs on.
	Name string

	mu          sync.Mutex
	incarnation int
	events      []AzureEvent
	started     []string
}

// NewAzure starts a fake IMDS for a VM named name, closed when the test
// ends.
func NewAzure(t testing.TB, name string) *Azure {
	a := &Azure{Name: name, incarnation: 1}
	a.Server = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.Close)
	return a
}

// Schedule adds an event to the document.
func (a *Azure) Schedule(ev AzureEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, ev)
	a.incarnation++
}

// Preempt schedules a Preempt event of this VM, NotBefore in 30 s as for a
// Spot VM eviction, and returns its id.
func (a *Azure) Preempt(id string) time.Time {
	at := time.Now().Add(30 * time.Second).UTC()
	a.Schedule(AzureEvent{EventId: id, EventStatus: "Scheduled", EventType: "Preempt", ResourceType: "VirtualMachine",
		Resources: []string{a.Name}, NotBefore: at.Format(time.RFC1123), EventSource: "Platform", DurationInSeconds: -1})
	return at.Truncate(time.Second)
}

// Started lists the event ids acknowledged so far.
func (a *Azure) Started() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.started)
}

func (a *Azure) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Metadata") != "true" {
		http.Error(w, `{"error":"Bad request. Required metadata header not specified"}`, http.StatusBadRequest)
		return
	}
	if r.URL.Query().Get("api-version") == "" {
		http.Error(w, `{"error":"Bad request. api-version was not specified in the request"}`, http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case r.URL.Path == "/metadata/instance/compute/name" && r.Method == http.MethodGet:
		w.Write([]byte(a.Name)) //nolint:errcheck // the client may be gone
	case r.URL.Path == "/metadata/scheduledevents" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"DocumentIncarnation": a.incarnation, "Events": a.eventList()}) //nolint:errcheck // the client may be gone
	case r.URL.Path == "/metadata/scheduledevents" && r.Method == http.MethodPost:
		var body struct {
			StartRequests []struct{ EventId string }
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.StartRequests) == 0 {
			http.Error(w, `{"error":"Bad request"}`, http.StatusBadRequest)
			return
		}
		for _, s := range body.StartRequests {
			a.started = append(a.started, s.EventId)
			a.events = slices.DeleteFunc(a.events, func(e AzureEvent) bool { return e.EventId == s.EventId })
		}
		a.incarnation++
		w.WriteHeader(http.StatusOK)
	default:
		http.NotFound(w, r)
	}
}

func (a *Azure) eventList() []AzureEvent {
	if a.events == nil {
		return []AzureEvent{}
	}
	return a.events
}
