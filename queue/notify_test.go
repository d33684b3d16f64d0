package queue_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
)

// A spec's webhook is one of the secrets it needs (checked to be set when
// it is submitted and retried), without being one the job receives; its
// when names the ends posted, every end when empty.
func TestNotifyNamesItsWebhookAmongTheSecretsTheSpecNeeds(t *testing.T) {
	t.Parallel()
	s, err := queue.ParseSpec([]byte("command: [train]\nsecrets: [HF_TOKEN]\nnotify: {webhook: SLACK_HOOK, when: [failed, dead]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.NamedSecrets(); !slices.Equal(got, []string{"HF_TOKEN", "SLACK_HOOK"}) || !slices.Equal(s.Secrets, []string{"HF_TOKEN"}) {
		t.Fatalf("NamedSecrets %v, Secrets %v", got, s.Secrets)
	}
	for st, want := range map[queue.JobState]bool{queue.StateFailed: true, queue.StateDead: true, queue.StateSucceeded: false, queue.StateCancelled: false} {
		if s.Notify.Wants(st) != want {
			t.Errorf("Wants(%s) = %v", st, !want)
		}
	}
	every, err := queue.ParseSpec([]byte("command: [train]\nsecrets: [HOOK]\nnotify: {webhook: HOOK}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := every.NamedSecrets(); !slices.Equal(got, []string{"HOOK"}) || !every.Notify.Wants(queue.StateRejected) || !every.Notify.Wants(queue.StateSucceeded) {
		t.Fatalf("a webhook also among the secrets: %v", got)
	}
	var none *queue.Notify
	if none.Wants(queue.StateFailed) {
		t.Fatal("no notify wants an end")
	}
}

// The text a chat shows says which job ended, how, and why.
func TestTheNotificationsTextSaysHowTheJobEnded(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("01a25060-1db8-7e86-b90e-4171fbeaaca1")
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	three := 3
	for _, c := range []struct {
		job  queue.NotifiedJob
		want string
	}{
		{queue.NotifiedJob{ID: id, Name: "train", Project: "ml", State: queue.StateSucceeded, Attempts: 1, SubmittedAt: at, EndedAt: at.Add(90 * time.Minute)},
			"gpuq: job train (01a25060-1db8-7e86-b90e-4171fbeaaca1) of project ml succeeded after 1 attempt(s), 1h30m0s"},
		{queue.NotifiedJob{ID: id, Project: "ml", State: queue.StateFailed, ExitCode: &three, Attempts: 3, SubmittedAt: at, EndedAt: at.Add(20 * time.Second)},
			"gpuq: job 01a25060-1db8-7e86-b90e-4171fbeaaca1 of project ml failed: exited with status 3 after 3 attempt(s), 20s"},
		{queue.NotifiedJob{ID: id, Name: "eval", Project: "ml", State: queue.StateDead, Reason: "preempted 21 times", Attempts: 21, SubmittedAt: at, EndedAt: at.Add(time.Hour),
			Spent: []string{"4.12 EUR", "0.50 USD"}},
			"gpuq: job eval (01a25060-1db8-7e86-b90e-4171fbeaaca1) of project ml dead: preempted 21 times after 21 attempt(s), 1h0m0s, 4.12 EUR + 0.50 USD"},
	} {
		if got := c.job.Summary(); got != c.want {
			t.Errorf("Summary:\n got %s\nwant %s", got, c.want)
		}
	}
}

// A line of output a post carries is valid UTF-8 without its carriage
// return, cut on a character's boundary.
func TestALineOfOutputAPostCarriesIsCut(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"epoch 3 loss 0.2\r": "epoch 3 loss 0.2",
		"a\xffb":             "a\uFFFDb",
		strings.Repeat("x", queue.MaxNotifyLogLine):       strings.Repeat("x", queue.MaxNotifyLogLine),
		strings.Repeat("x", queue.MaxNotifyLogLine+1):     strings.Repeat("x", queue.MaxNotifyLogLine-len("…")) + "…",
		"é" + strings.Repeat("€", queue.MaxNotifyLogLine): "é" + strings.Repeat("€", (queue.MaxNotifyLogLine-len("…")-2)/3) + "…",
	} {
		if got := queue.NotifyLogLine(in); got != want || len(got) > queue.MaxNotifyLogLine {
			t.Errorf("NotifyLogLine(%.20q…) = %.20q… (%d bytes), want %.20q… (%d bytes)", in, got, len(got), want, len(want))
		}
	}
}
