package queue

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/google/uuid"
)

// subjectRecorder records what is published, by subject.
type subjectRecorder struct{ published map[string][]Event }

func (r *subjectRecorder) Publish(subject string, payload []byte) error {
	var ev Event
	if err := json.Unmarshal(payload, &ev); err != nil {
		return err
	}
	r.published[subject] = append(r.published[subject], ev)
	return nil
}

// The replacer follows ReplaceSubject alone, so an event of a job a
// preempted worker handed back must be published there as well as on the
// job's own subject, and no other event may be.
func TestOnlyAPreemptedHandBackIsAnnouncedToTheReplacer(t *testing.T) {
	job := uuid.New()
	events := []Event{
		{JobID: job, State: StatePending, Message: "submitted"},
		{JobID: job, State: StatePlaced, Message: "placed on pool a"},
		{JobID: job, State: StateRunning, Attempt: 1},
		{JobID: job, State: StatePlaced, Attempt: 1, Outcome: OutcomeLost},
		{JobID: job, State: StatePlaced, Attempt: 1, Outcome: OutcomePreempted, Message: "preempted: notice"},
		{JobID: job, State: StateSucceeded, Attempt: 2, Outcome: OutcomePreempted},
	}
	rec := &subjectRecorder{published: map[string][]Event{}}
	(&EventPublisher{NATS: rec}).Announce(context.Background(), events)

	if got := rec.published[EventSubject(job.String())]; len(got) != len(events) {
		t.Fatalf("job's own subject: %d events, want all %d", len(got), len(events))
	}
	got := rec.published[ReplaceSubject(job.String())]
	if len(got) != 1 || got[0].Message != "preempted: notice" {
		t.Fatalf("replace subject: got %+v, want only the preempted hand-back", got)
	}
	if len(rec.published) != 2 {
		t.Fatalf("published on %v, want the job's event and replace subjects only", slices.Collect(maps.Keys(rec.published)))
	}
}
