package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control/httpapi"
)

// TestAJobsOutputIsReadFromItsLastLines reads a finished job's output from
// its last lines, as a range and followed, as the OpenAPI document says;
// Last-Event-ID goes on from its chunk whatever the tail, and a tail out
// of bounds is a problem naming it.
func TestAJobsOutputIsReadFromItsLastLines(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	doc := loadOpenAPI(t)
	token := e.token(queue.RoleRead, nil, "ml")
	submitter := e.token(queue.RoleSubmit, nil, "ml")
	job := e.submit(submitter, "project: ml\ncommand: [/bin/sh, -c, 'for i in 1 2 3 4 5 6; do echo line $i; done']\n")
	e.waitState(submitter, job.ID, queue.StateSucceeded)
	path := "/v1/jobs/" + job.ID.String() + "/logs"
	get := func(query string, want int) *response {
		t.Helper()
		r := e.do("GET", path+query, token, "", nil)
		if r.Status != want {
			t.Fatalf("GET %s%s: %d, want %d: %s", path, query, r.Status, want, r.Body)
		}
		doc.check(t, "GET", "/v1/jobs/{id}/logs", r)
		return r
	}
	text := func(p httpapi.LogPage) string {
		var b strings.Builder
		for _, c := range p.Chunks {
			b.WriteString(c.Data)
		}
		return b.String()
	}
	var whole, tail httpapi.LogPage
	get("", http.StatusOK).json(t, &whole)
	if text(whole) != "line 1\nline 2\nline 3\nline 4\nline 5\nline 6\n" {
		t.Fatalf("the whole output: %+v", whole)
	}
	get("?tail=2", http.StatusOK).json(t, &tail)
	if text(tail) != "line 5\nline 6\n" || tail.NextAfter != whole.NextAfter {
		t.Fatalf("tail=2: %+v, want the last two lines and next_after %d", tail, whole.NextAfter)
	}
	get("?tail=2&attempt=1", http.StatusOK).json(t, &tail)
	if text(tail) != "line 5\nline 6\n" {
		t.Fatalf("tail=2&attempt=1: %+v", tail)
	}
	get("?tail=100", http.StatusOK).json(t, &tail)
	if text(tail) != text(whole) {
		t.Fatalf("tail=100 of six lines: %+v, want them all", tail)
	}
	get("?tail=10001", http.StatusUnprocessableEntity)
	if r := get("?tail=-1", http.StatusUnprocessableEntity); !strings.Contains(string(r.Body), "query.tail") {
		t.Fatalf("a bad tail must name it: %s", r.Body)
	}

	evs := e.events(path+"?follow=true&tail=1", token, nil, 10*time.Second, nil)
	if len(evs) != 2 || evs[0].Event != "log" || !strings.Contains(evs[0].Data, `"data":"line 6\n"`) || evs[1].Event != "end" {
		t.Fatalf("followed from the last line: %+v", evs)
	}
	// A stream reopened after its last chunk goes on from there: the tail
	// in its URL is not read again.
	if evs := e.events(path+"?follow=true&tail=3", token, []string{"Last-Event-ID", evs[0].ID}, 10*time.Second, nil); len(evs) != 1 || evs[0].Event != "end" {
		t.Fatalf("reopened after the last chunk with tail=3: %+v, want the end alone", evs)
	}
}
