package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
)

func TestStatusSaysWhenARunningJobsHeartbeatIsLateAndWhenItsLeaseRunsOut(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	running := func(beatAgo time.Duration) (*queue.Job, []queue.Attempt) {
		beat := now.Add(-beatAgo)
		expires := beat.Add(30 * time.Second)
		return &queue.Job{State: queue.StateRunning, Attempt: 2, LeaseExpiresAt: &expires},
			[]queue.Attempt{{Attempt: 1, HeartbeatAt: now.Add(-time.Hour), EndedAt: &beat}, {Attempt: 2, HeartbeatAt: beat}}
	}
	for _, tc := range []struct {
		name    string
		beatAgo time.Duration
		want    string
	}{
		{"on time", 5 * time.Second, "last 5s ago; lease expires in 25s"},
		{"a beat overdue", 14 * time.Second, "late: last 14s ago; lease expires in 16s"},
		{"past the lease", 33 * time.Second, "late: last 33s ago; the lease expired 3s ago"},
	} {
		j, attempts := running(tc.beatAgo)
		if got := leaseLine(j, attempts, now); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: got %q, want it to start with %q", tc.name, got, tc.want)
		}
	}
	j, attempts := running(5 * time.Second)
	j.State = queue.StateSucceeded
	if got := leaseLine(j, attempts, now); got != "" {
		t.Errorf("a finished job has no heartbeat line, got %q", got)
	}
}
