package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
)

// A job's event stream that drops, or whose server answers 503 while it
// restarts, is reopened after the last event received (Last-Event-ID), so
// that no event is shown twice and none is missed; an answer that is no
// outage (404) ends it, and so does a first connection that fails.
func TestAJobsEventStreamIsReopenedWhereItDropped(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	event := func(seq int, state queue.JobState) string {
		return fmt.Sprintf("id: %d\nevent: state\ndata: {\"job_id\":%q,\"state\":%q,\"attempt\":1}\n\n", seq, id, state)
	}
	var mu sync.Mutex
	var asked []string // the Last-Event-ID of each request
	answers := []func(w http.ResponseWriter){
		func(w http.ResponseWriter) { fmt.Fprint(w, event(1, queue.StatePending)+event(2, queue.StatePlaced)) }, // then the connection ends
		func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) },
		func(w http.ResponseWriter) {
			fmt.Fprint(w, event(3, queue.StateRunning)+event(4, queue.StateSucceeded))
		},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n := len(asked)
		asked = append(asked, r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		if r.URL.Path != jobPath(id, "/events") || n >= len(answers) {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		answers[n](w)
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL)
	var stderr bytes.Buffer
	a := &apiJobs{base: base, token: "t", http: srv.Client(), stderr: &stderr}
	var states []string
	err := a.Events(context.Background(), id, func(ev queue.Event) bool {
		states = append(states, string(ev.State))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(states, " "), "pending placed running succeeded"; got != want {
		t.Fatalf("states %q, want %q", got, want)
	}
	if got, want := strings.Join(asked, ","), ",2,2"; got != want {
		t.Fatalf("Last-Event-ID of each request %q, want %q", got, want)
	}
	if strings.Count(stderr.String(), "reopening it") != 1 || strings.Count(stderr.String(), "\n") != 1 {
		t.Fatalf("want one line on stderr for the outage, got:\n%s", stderr.String())
	}

	// A refusal ends the stream; so does a server never reached.
	missing := uuid.New()
	if err := a.Events(context.Background(), missing, func(queue.Event) bool { return true }); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		t.Fatalf("a job not found: %v, want the 404", err)
	}
	srv.Close()
	if err := a.Events(context.Background(), id, func(queue.Event) bool { return true }); err == nil {
		t.Fatal("a server never reached must be an error at once")
	}
}
