package control_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/queue"
)

// TestALogReadBeginsWithTheLastLinesItAsksFor reads a job's output from its
// last lines over the client service, on real JetStream: chunks of several
// lines, a line cut across chunks, stderr between the halves of a stdout
// line, a last line without a newline, and a second attempt.
func TestALogReadBeginsWithTheLastLinesItAsksFor(t *testing.T) {
	t.Parallel()
	h := startClientService(t, 0)
	ctx := context.Background()
	id := h.recordJob(t, "default")
	other := h.recordJob(t, "default")
	for _, c := range []struct {
		job     bool
		attempt int
		stream  string
		data    string
	}{
		{true, 1, "stdout", "a1\na2\na3\n"},
		{false, 1, "stdout", "another job's line\n"}, // never shown
		{true, 1, "stdout", "a4 begins"},
		{true, 1, "stderr", "e1\n"},
		{true, 1, "stdout", " and ends\na5\n"},
		{true, 2, "stdout", "b1\nb2\n"},
		{true, 2, "stdout", "b3 with no newline"},
	} {
		job := id
		if !c.job {
			job = other
		}
		msg := queue.NewLogMsg("p", job, queue.LogChunk{Attempt: c.attempt, Stream: c.stream, Data: []byte(c.data)})
		if _, err := h.n.JS.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	read := func(req queue.ClientRequest) string {
		t.Helper()
		req.JobID = id
		only := req.Attempt
		var out strings.Builder
		for {
			body, code, msg := h.call(t, "default", queue.ClientOpLogs, req)
			if code != "" {
				t.Fatalf("logs %+v: %s %s", req, code, msg)
			}
			var page queue.ClientLogPage
			if err := json.Unmarshal(body, &page); err != nil {
				t.Fatal(err)
			}
			for _, c := range page.Chunks {
				if only == 0 || c.Attempt == only {
					out.WriteString(c.Data)
				}
			}
			if !page.More {
				return out.String()
			}
			req.After, req.Tail, req.Attempt = page.NextAfter, 0, 0
		}
	}
	whole := "a1\na2\na3\na4 beginse1\n and ends\na5\nb1\nb2\nb3 with no newline"
	for _, c := range []struct {
		tail, attempt int
		want          string
	}{
		{0, 0, whole},
		{1, 0, "b3 with no newline"},
		{3, 0, "b1\nb2\nb3 with no newline"},
		{4, 0, "a5\nb1\nb2\nb3 with no newline"},
		// The line that stderr cut in two counts once, from its start.
		{6, 0, "a4 begins" + "e1\n and ends\na5\nb1\nb2\nb3 with no newline"},
		{100, 0, whole},
		// Attempt 1's last lines (the reader leaves attempt 2's out).
		{1, 1, "a5\n"},
		{2, 1, "e1\n and ends\na5\n"},
		{3, 1, "a4 beginse1\n and ends\na5\n"},
		{2, 2, "b2\nb3 with no newline"},
		{50, 2, "b1\nb2\nb3 with no newline"},
	} {
		if got := read(queue.ClientRequest{Tail: c.tail, Attempt: c.attempt}); got != c.want {
			t.Errorf("tail %d of attempt %d: got %q, want %q", c.tail, c.attempt, got, c.want)
		}
	}
	// A read that goes on from a chunk ignores the tail.
	if body, code, _ := h.call(t, "default", queue.ClientOpLogs, queue.ClientRequest{JobID: id, After: 1, Tail: 1}); code != "" || !strings.Contains(string(body), `"a4 begins"`) {
		t.Errorf("after 1 with tail 1: %s %s", code, body)
	}
	for _, req := range []queue.ClientRequest{{JobID: id, Tail: -1}, {JobID: id, Tail: queue.MaxLogTail + 1}, {JobID: id, Tail: 2, Attempt: -1}} {
		if _, code, msg := h.call(t, "default", queue.ClientOpLogs, req); code != "400" {
			t.Errorf("%+v: got %q %q, want a 400", req, code, msg)
		}
	}
}
