package httpapi_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
)

// TestJobsAreCountedByStateAsTheirListingShowsThem: GET /v1/jobs/counts
// counts what GET /v1/jobs with the same filters lists, whatever its pages,
// by state, every state present; only the token's projects count.
func TestJobsAreCountedByStateAsTheirListingShowsThem(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	doc := loadOpenAPI(t)
	ml := e.token(queue.RoleSubmit, nil, "ml")
	vision := e.token(queue.RoleSubmit, nil, "vision")
	both := e.token(queue.RoleRead, nil, "ml", "vision")

	prep := e.submit(ml, "project: ml\nname: prep\ncommand: [sleep, \"60\"]\nlabels: {sweep: lr}\n")
	var runs []*queue.Job
	for i := range 3 {
		runs = append(runs, e.submit(ml, fmt.Sprintf("project: ml\nname: run-%d\ncommand: [/bin/true]\nlabels: {sweep: lr}\nafter_ended: [%s]\n", i, prep.ID)))
	}
	bad := e.submit(ml, "project: ml\nname: bad\ncommand: [/bin/false]\nretries: {max_errors: 0}\nlabels: {sweep: lr}\n")
	e.submit(ml, "project: ml\nname: other\ncommand: [/bin/true]\nlabels: {sweep: other}\n")
	e.submit(vision, "project: vision\nname: theirs\ncommand: [/bin/true]\nlabels: {sweep: lr}\n")
	e.waitState(ml, prep.ID, queue.StateRunning)
	e.waitState(ml, bad.ID, queue.StateFailed)

	count := func(token, query string) queue.JobCounts {
		t.Helper()
		r := e.do("GET", "/v1/jobs/counts?"+query, token, "", nil)
		if r.Status != http.StatusOK {
			t.Fatalf("counts?%s: %d %s", query, r.Status, r.Body)
		}
		doc.check(t, "GET", "/v1/jobs/counts", r)
		var c queue.JobCounts
		r.json(t, &c)
		if len(c.States) != len(queue.States) {
			t.Fatalf("counts?%s: states %v, want every one of %v", query, c.States, queue.States)
		}
		// A listing with the same filters, a job a page, shows as many.
		var listed []queue.Job
		for cursor := ""; ; {
			var page struct {
				Jobs       []queue.Job
				NextCursor string `json:"next_cursor"`
			}
			e.do("GET", "/v1/jobs?limit=1&"+query+"&cursor="+url.QueryEscape(cursor), token, "", nil).json(t, &page)
			listed = append(listed, page.Jobs...)
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		byState := map[queue.JobState]int64{}
		for _, j := range listed {
			byState[j.State]++
		}
		if c.Total != int64(len(listed)) {
			t.Fatalf("counts?%s: total %d, the listing shows %d jobs", query, c.Total, len(listed))
		}
		for _, st := range queue.States {
			if c.States[st] != byState[st] {
				t.Fatalf("counts?%s: %d %s, the listing shows %d", query, c.States[st], st, byState[st])
			}
		}
		return c
	}
	want := func(query string, c queue.JobCounts, total int64, states map[queue.JobState]int64) {
		t.Helper()
		if c.Total != total {
			t.Fatalf("counts?%s: total %d, want %d", query, c.Total, total)
		}
		for _, st := range queue.States {
			if c.States[st] != states[st] {
				t.Fatalf("counts?%s: %d %s, want %d (%v)", query, c.States[st], st, states[st], c.States)
			}
		}
	}
	sweep := map[queue.JobState]int64{queue.StateRunning: 1, queue.StateWaiting: 3, queue.StateFailed: 1}
	want("label=sweep=lr", count(ml, "label=sweep%3Dlr"), 5, sweep)
	want("label=sweep=lr&project=ml", count(both, "label=sweep%3Dlr&project=ml"), 5, sweep)
	want("label=sweep=lr (both projects)", count(both, "label=sweep%3Dlr"), 6, map[queue.JobState]int64{
		queue.StateRunning: 1, queue.StateWaiting: 3, queue.StateFailed: 1, queue.StateSucceeded: 1})
	// Another project's jobs are none of this token's: counted as none.
	want("project=vision", count(ml, "project=vision"), 0, nil)
	want("state=waiting", count(ml, "state=waiting"), 3, map[queue.JobState]int64{queue.StateWaiting: 3})
	want("runs_after", count(ml, "runs_after="+prep.ID.String()), 3, map[queue.JobState]int64{queue.StateWaiting: 3})
	want("since", count(ml, "since="+url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339))), 0, nil)
	// The jobs placed on a pool: those waiting are on none yet.
	want("pool=de-cpu", count(ml, "pool=de-cpu&label=sweep%3Dlr"), 2, map[queue.JobState]int64{queue.StateRunning: 1, queue.StateFailed: 1})
	want("pool=us-gpu", count(ml, "pool=us-gpu"), 0, nil)
	all := count(ml, "")
	if all.Total != 6 || all.Finished() != 2 {
		t.Fatalf("every job of ml: %+v (finished %d), want 6 with 2 finished", all, all.Finished())
	}

	// Once prep ends, the runs after it run: the counts follow.
	if r := e.do("POST", "/v1/jobs/"+prep.ID.String()+"/cancel", ml, "", nil); r.Status != http.StatusOK {
		t.Fatalf("cancel prep: %d %s", r.Status, r.Body)
	}
	for _, run := range runs {
		e.waitState(ml, run.ID, queue.StateSucceeded)
	}
	want("label=sweep=lr, ended", count(ml, "label=sweep%3Dlr"), 5, map[queue.JobState]int64{
		queue.StateCancelled: 1, queue.StateSucceeded: 3, queue.StateFailed: 1})

	for _, tc := range []struct{ query, field, msg string }{
		{"label=sweep", "query.label", `want key=value, got "sweep"`},
		{"runs_after=prep", "query.runs_after", `must be a job id as gpuq prints it, got "prep"`},
		{"since=yesterday", "query.since", `want an RFC 3339 time`},
		{"state=done", "query.state", "expected value to be one of"},
		{"pool=de%20cpu", "query.pool", "a pool id"},
	} {
		r := e.do("GET", "/v1/jobs/counts?"+tc.query, ml, "", nil)
		if r.Status != http.StatusUnprocessableEntity {
			t.Fatalf("counts?%s: %d %s, want 422", tc.query, r.Status, r.Body)
		}
		doc.check(t, "GET", "/v1/jobs/counts", r)
		problemAt(t, r, tc.field, tc.msg)
	}
}
