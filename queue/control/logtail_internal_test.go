package control

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// The tail of a long log is found by reading back from its end in windows
// that grow until one holds the lines asked for: whatever the first
// window, it begins where reading the whole log says, or, where a window
// began inside a line of stdout or stderr, at most that line earlier
// each; the other jobs' chunks in between change nothing.
func TestTheTailOfALongLogIsFoundFromItsEnd(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	ctx := context.Background()
	job, other := uuid.New(), uuid.New()
	var whole strings.Builder
	publish := func(id uuid.UUID, stream, data string) {
		t.Helper()
		if _, err := n.JS.PublishMsg(ctx, queue.NewLogMsg("p", id, queue.LogChunk{Attempt: 1, Stream: stream, Data: []byte(data)})); err != nil {
			t.Fatal(err)
		}
		if id == job {
			whole.WriteString(data)
		}
	}
	for i := range 40 {
		publish(job, "stdout", fmt.Sprintf("step %d\nloss %d\n", i, 40-i))
		publish(other, "stdout", "another job\n")
		if i%7 == 0 {
			publish(job, "stderr", fmt.Sprintf("warning %d begins", i))
			publish(job, "stderr", " and ends\n")
		}
	}
	text := func(from LogStart) string {
		t.Helper()
		page, err := ReadLogPage(ctx, n.JS, &queue.Job{ID: job}, from, 1000, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, c := range page.Chunks {
			b.WriteString(c.Data)
		}
		return b.String()
	}
	same := 0
	for _, lines := range []int{1, 2, 5, 17, 80, 200} {
		full, err := logTail(ctx, n.JS, job, lines, 0, 1<<40)
		if err != nil {
			t.Fatal(err)
		}
		want := text(full)
		if !strings.HasSuffix(whole.String(), want) {
			t.Fatalf("the tail of %d lines read whole is not the log's end: %q", lines, want)
		}
		for _, window := range []uint64{1, 2, 3, 5, 64} {
			got, err := logTail(ctx, n.JS, job, lines, 0, window)
			if err != nil {
				t.Fatal(err)
			}
			g := text(got)
			if g == want {
				same++
			} else if !strings.HasSuffix(g, want) || strings.Count(g, "\n") > strings.Count(want, "\n")+2 {
				t.Errorf("%d lines from a first window of %d: got %q, want %q (or a line more of each stream)", lines, window, g, want)
			}
		}
	}
	if same < 20 {
		t.Errorf("only %d of 30 tails read back from the end were the tail read whole", same)
	}
}
