package queue_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
)

func TestSequenceSaysWhetherAJobMayRunWaitsOrNeverWill(t *testing.T) {
	t.Parallel()
	self, a, b, c := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	dep := func(id uuid.UUID, name string, st queue.JobState) queue.Dependency {
		return queue.Dependency{ID: id, Name: name, State: st, Project: "vision"}
	}
	ids := func(u ...uuid.UUID) []string {
		out := make([]string, len(u))
		for i, id := range u {
			out[i] = id.String()
		}
		return out
	}
	cases := []struct {
		name  string
		after []string
		deps  []queue.Dependency
		want  queue.Readiness
		why   string
	}{
		{"all succeeded", ids(a, b), []queue.Dependency{dep(a, "prep", queue.StateSucceeded), dep(b, "", queue.StateSucceeded)}, queue.Ready, ""},
		{"one running", ids(a), []queue.Dependency{dep(a, "prep", queue.StateRunning)}, queue.Waiting,
			fmt.Sprintf("waiting for job %s (prep) to succeed (it is running)", a)},
		{"some of several", ids(a, b, c), []queue.Dependency{dep(a, "prep", queue.StateSucceeded), dep(b, "", queue.StateWaiting), dep(c, "c", queue.StatePlaced)}, queue.Waiting,
			fmt.Sprintf("waiting for 2 of the 3 jobs it runs after to succeed: %s waiting, %s (c) placed", b, c)},
		{"one failed", ids(a, b), []queue.Dependency{dep(a, "prep", queue.StateRunning), dep(b, "train", queue.StateFailed)}, queue.Never,
			fmt.Sprintf("job %s (train) it runs after ended failed: retry it and the jobs after it (gpuq retry --downstream %[1]s)", b)},
		{"one dead", ids(a), []queue.Dependency{dep(a, "", queue.StateDead)}, queue.Never,
			fmt.Sprintf("job %s it runs after ended dead: retry it and the jobs after it (gpuq retry --downstream %[1]s)", a)},
		{"not found", ids(a), nil, queue.Never, fmt.Sprintf("job %s it runs after is not a job of project vision", a)},
		{"another project's", ids(a), []queue.Dependency{{ID: a, State: queue.StateSucceeded, Project: "other"}}, queue.Never,
			fmt.Sprintf("job %s it runs after is not a job of project vision", a)},
		{"itself", ids(self), []queue.Dependency{dep(self, "", queue.StatePending)}, queue.Never, "spec.after names the job itself"},
		// Cancelled for a job it ran after in turn: the reason names that
		// one, which is what to retry.
		{"cancelled in a chain", ids(a), []queue.Dependency{{ID: a, Name: "train", State: queue.StateCancelled, Project: "vision",
			Reason: fmt.Sprintf("job %s (prep) it runs after ended failed: retry it and the jobs after it (gpuq retry --downstream %[1]s)", c)}}, queue.Never,
			fmt.Sprintf("job %s (prep) it runs after ended failed: retry it and the jobs after it (gpuq retry --downstream %[1]s)", c)},
		{"cancelled by its user", ids(a), []queue.Dependency{{ID: a, Name: "train", State: queue.StateCancelled, Project: "vision", Reason: "cancelled by user"}}, queue.Never,
			fmt.Sprintf("job %s (train) it runs after ended cancelled: retry it and the jobs after it (gpuq retry --downstream %[1]s)", a)},
	}
	for _, tc := range cases {
		r, why := queue.Sequence(self, "vision", &queue.Spec{Project: "vision", After: tc.after}, tc.deps)
		if r != tc.want || why != tc.why {
			t.Errorf("%s: got %d %q, want %d %q", tc.name, r, why, tc.want, tc.why)
		}
	}
	many := make([]uuid.UUID, 5)
	var deps []queue.Dependency
	for i := range many {
		many[i] = uuid.New()
		deps = append(deps, dep(many[i], "", queue.StateRunning))
	}
	if _, why := queue.Sequence(self, "vision", &queue.Spec{After: ids(many...)}, deps); why != fmt.Sprintf("waiting for 5 of the 5 jobs it runs after to succeed: %s running, %s running, %s running and 2 more", many[0], many[1], many[2]) {
		t.Errorf("five running: %q", why)
	}

	// Jobs of after_ended may end however they end; those of after must
	// still succeed.
	ended := []struct {
		name        string
		after, ends []string
		deps        []queue.Dependency
		want        queue.Readiness
		why         string
	}{
		{"ended otherwise", nil, ids(a, b, c), []queue.Dependency{dep(a, "", queue.StateFailed), dep(b, "", queue.StateCancelled), dep(c, "", queue.StateDead)}, queue.Ready, ""},
		{"one running", nil, ids(a), []queue.Dependency{dep(a, "lr-1", queue.StateRunning)}, queue.Waiting,
			fmt.Sprintf("waiting for job %s (lr-1) to end (it is running)", a)},
		{"some of several", nil, ids(a, b), []queue.Dependency{dep(a, "", queue.StateRejected), dep(b, "", queue.StatePending)}, queue.Waiting,
			fmt.Sprintf("waiting for 1 of the 2 jobs it runs after to end: %s pending", b)},
		{"both lists", ids(a), ids(b, c), []queue.Dependency{dep(a, "prep", queue.StateRunning), dep(b, "", queue.StateFailed), dep(c, "", queue.StateRunning)}, queue.Waiting,
			fmt.Sprintf("waiting for 2 of the 3 jobs it runs after to succeed (spec.after) or end (spec.after_ended): %s (prep) running, %s running", a, c)},
		{"after failed", ids(a), ids(b), []queue.Dependency{dep(a, "prep", queue.StateFailed), dep(b, "", queue.StateSucceeded)}, queue.Never,
			fmt.Sprintf("job %s (prep) it runs after ended failed: retry it and the jobs after it (gpuq retry --downstream %[1]s)", a)},
		{"not found", nil, ids(a), nil, queue.Never, fmt.Sprintf("job %s it runs after is not a job of project vision", a)},
		{"itself", nil, ids(self), []queue.Dependency{dep(self, "", queue.StatePending)}, queue.Never, "spec.after_ended names the job itself"},
	}
	for _, tc := range ended {
		r, why := queue.Sequence(self, "vision", &queue.Spec{After: tc.after, AfterEnded: tc.ends}, tc.deps)
		if r != tc.want || why != tc.why {
			t.Errorf("after_ended, %s: got %d %q, want %d %q", tc.name, r, why, tc.want, tc.why)
		}
	}
}
