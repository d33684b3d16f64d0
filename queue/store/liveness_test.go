package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

func TestFenceLostHandsTheJobBackAtOnceAndFencesTheLostAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	id := placedJob(t, s)
	first, err := claim(t, s, id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ref := queue.AttemptRef{JobID: id, Attempt: first.Job.Attempt}
	// Only the worker that claimed the attempt, on its pool, can be lost
	// with it.
	for _, who := range []struct{ pool, worker string }{{"p", "other"}, {"other", "w"}} {
		got, err := s.FenceLost(ctx, who.pool, who.worker, []queue.AttemptRef{ref}, "lost")
		if err != nil || len(got) != 0 {
			t.Fatalf("worker %s of pool %s does not hold the attempt; want nothing handed back, got %v (%v)", who.worker, who.pool, got, err)
		}
	}
	if err := s.Heartbeat(ctx, id, ref.Attempt, time.Hour); err != nil {
		t.Fatalf("the attempt must still be live: %v", err)
	}
	got, err := s.FenceLost(ctx, "p", "w", []queue.AttemptRef{ref, {JobID: placedJob(t, s), Attempt: 1}}, "worker w lost: no liveness beat")
	if err != nil || len(got) != 1 || got[0] != ref {
		t.Fatalf("want exactly the held attempt handed back, got %v (%v)", got, err)
	}
	if again, err := s.FenceLost(ctx, "p", "w", []queue.AttemptRef{ref}, "lost"); err != nil || len(again) != 0 {
		t.Fatalf("handing back twice must change nothing, got %v (%v)", again, err)
	}
	// The lost attempt can write nothing any more.
	if err := s.Heartbeat(ctx, id, ref.Attempt, time.Hour); !errors.Is(err, queue.ErrFenced) {
		t.Errorf("lost heartbeat: want ErrFenced, got %v", err)
	}
	if _, err := s.RecordCheckpoint(ctx, id, ref.Attempt, queue.ArchiveRecord{Bytes: 1, SHA256: "x", Region: "r", StoreURI: "u"}); !errors.Is(err, queue.ErrFenced) {
		t.Errorf("lost checkpoint: want ErrFenced, got %v", err)
	}
	if ok, err := s.SucceedMany(ctx, []queue.AttemptRef{ref}); err != nil || ok[0] {
		t.Errorf("lost success: want refused, got %v (%v)", ok, err)
	}
	// Another worker claims it at once, though the lost lease had an hour
	// left.
	second, err := claim(t, s, id, time.Hour)
	if err != nil {
		t.Fatalf("the handed-back job must be claimable at once: %v", err)
	}
	if second.Job.Attempt != ref.Attempt+1 || second.Job.Preemptions != 1 {
		t.Fatalf("want attempt %d with one preemption, got attempt %d with %d", ref.Attempt+1, second.Job.Attempt, second.Job.Preemptions)
	}
	if ok, err := s.SucceedMany(ctx, []queue.AttemptRef{ref}); err != nil || ok[0] {
		t.Errorf("lost success after the new claim: want refused, got %v (%v)", ok, err)
	}
	attempts, err := s.Attempts(ctx, id)
	if err != nil || len(attempts) != 2 || attempts[0].Outcome != queue.OutcomeLost || attempts[1].EndedAt != nil {
		t.Fatalf("want attempt 1 lost and attempt 2 running, got %+v (%v)", attempts, err)
	}
	events, err := s.EventsOf(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var trail []string
	for _, ev := range events {
		trail = append(trail, string(ev.State))
	}
	if want := "pending placed running placed running"; strings.Join(trail, " ") != want {
		t.Fatalf("want events %q, got %q", want, strings.Join(trail, " "))
	}
	if lost := events[3]; lost.Attempt != 1 || !strings.Contains(lost.Message, "worker w lost") {
		t.Fatalf("the hand-back event must name the lost worker and attempt 1, got %+v", lost)
	}
}
