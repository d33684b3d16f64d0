package queue_test

import (
	"slices"
	"testing"

	"github.com/gpuq/gpuq/queue"
)

// States lists every state once, in the order of a job's life, the
// terminal ones last: the order counts and listings show them in.
func TestStatesListsEveryStateOnceTheTerminalOnesLast(t *testing.T) {
	want := []queue.JobState{queue.StatePending, queue.StateWaiting, queue.StatePlaced, queue.StateRunning,
		queue.StateSucceeded, queue.StateFailed, queue.StateCancelled, queue.StateRejected, queue.StateDead}
	if !slices.Equal(queue.States, want) {
		t.Fatalf("States = %v, want %v", queue.States, want)
	}
	for i, s := range queue.States {
		if s.Terminal() != (i >= 4) {
			t.Errorf("%s: terminal %v at place %d", s, s.Terminal(), i)
		}
	}
	c := queue.NoJobs()
	c.Add(queue.JobCounts{Total: 3, States: map[queue.JobState]int64{queue.StateRunning: 1, queue.StateFailed: 2}})
	if c.Total != 3 || c.Finished() != 2 || len(c.States) != len(queue.States) {
		t.Fatalf("counts after adding: %+v, finished %d", c, c.Finished())
	}
}
