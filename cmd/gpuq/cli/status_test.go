package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/policy"
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

func TestStatusOfAPlacedJobSaysWhereItStandsInItsPoolsLine(t *testing.T) {
	for _, tc := range []struct {
		line queue.PoolLine
		want string
	}{
		{queue.PoolLine{Pool: "local-cpu-spot", Ahead: 3, Running: 2}, "waiting    3 jobs of pool local-cpu-spot have waited longer; 2 running there\n"},
		{queue.PoolLine{Pool: "gpu-h100", Ahead: 1}, "waiting    1 job of pool gpu-h100 has waited longer; 0 running there\n"},
		{queue.PoolLine{Pool: "gpu-h100", Running: 4}, "waiting    no job of pool gpu-h100 has waited longer; 4 running there\n"},
		{queue.PoolLine{Pool: "gpu-h100", Running: 4, Workers: ptr(2)}, "waiting    no job of pool gpu-h100 has waited longer; 4 running there on 2 live workers\n"},
		{queue.PoolLine{Pool: "gpu-h100", Running: 1, Workers: ptr(1)}, "waiting    no job of pool gpu-h100 has waited longer; 1 running there on 1 live worker\n"},
		{queue.PoolLine{Pool: "gpu-h100", Ahead: 5, Workers: ptr(0)}, "waiting    5 jobs of pool gpu-h100 have waited longer; 0 running there; no live worker of the pool\n"},
		{queue.PoolLine{Pool: "gpu-h100", Running: 1, Workers: ptr(1), Paused: ptr(0)}, "waiting    no job of pool gpu-h100 has waited longer; 1 running there on 1 live worker\n"},
		{queue.PoolLine{Pool: "gpu-h100", Ahead: 2, Workers: ptr(1), Paused: ptr(1)}, "waiting    2 jobs of pool gpu-h100 have waited longer; 0 running there on 1 live worker, paused after host errors\n"},
		{queue.PoolLine{Pool: "gpu-h100", Ahead: 2, Workers: ptr(2), Paused: ptr(2)}, "waiting    2 jobs of pool gpu-h100 have waited longer; 0 running there on 2 live workers, all paused after host errors\n"},
		{queue.PoolLine{Pool: "gpu-h100", Ahead: 2, Running: 3, Workers: ptr(3), Paused: ptr(1)}, "waiting    2 jobs of pool gpu-h100 have waited longer; 3 running there on 3 live workers, 1 of them paused after host errors\n"},
	} {
		var out strings.Builder
		st := &JobStatus{Job: &queue.Job{State: queue.StatePlaced, Pool: tc.line.Pool, PlacementVersion: 1}, Pool: tc.line.Pool, Waiting: &tc.line}
		if err := printStatus(&out, st); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("%+v: status printed\n%s\nwant the line %q", tc.line, out.String(), tc.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// The attempts table says how long each attempt ran: what a spot job lost
// to a preemption shows beside what the next one took.
func TestStatusSaysHowLongEachAttemptRan(t *testing.T) {
	start := time.Now().Add(-2 * time.Hour)
	at := func(d time.Duration) *time.Time { t := start.Add(d); return &t }
	st := &JobStatus{Job: &queue.Job{State: queue.StateRunning, Attempt: 3}, Attempts: []queue.Attempt{
		{Attempt: 1, Host: "a", Pool: "spot", StartedAt: start, EndedAt: at(83*time.Minute + 12*time.Second + 400*time.Millisecond), Outcome: queue.OutcomePreempted},
		{Attempt: 2, Host: "b", Pool: "spot", StartedAt: start.Add(90 * time.Minute), EndedAt: at(90*time.Minute + 1234*time.Millisecond), Outcome: queue.OutcomeHostError},
		{Attempt: 3, Host: "c", Pool: "spot", StartedAt: start.Add(100 * time.Minute)},
	}}
	var out strings.Builder
	if err := printStatus(&out, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`(?m)^1 +a .* 1h23m12s +preempted `, `(?m)^2 +b .* 1\.2s +host_error `, `(?m)^3 +c .* 20m0s so far +running `} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("status printed\n%s\nwant a line matching %s", out.String(), want)
		}
	}
}

// gpuq workers shows each live worker, what it holds, and until when and
// why a paused one takes no work, escaped as every table escapes text.
func TestWorkersTableShowsWhatEachHoldsAndWhyOnePauses(t *testing.T) {
	now := time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC)
	until := now.Add(30 * time.Second)
	var out strings.Builder
	err := printWorkers(&out, []queue.LiveWorker{
		{Worker: "vm-1", Node: "gq-1", Pool: "gpu-h100", LastBeatAt: now.Add(-120 * time.Millisecond), Held: 3},
		{Worker: "vm-2", Pool: "gpu-h100", LastBeatAt: now.Add(-40 * time.Millisecond), PausedUntil: &until,
			PauseReason: "\x1b[2Jpreparing directories: mkdir /var/lib/gpuq/x: no space left on device"},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "WORKER") {
		t.Fatalf("want a header and a line per worker, got\n%s", out.String())
	}
	for _, want := range []string{"vm-1", "gq-1", "120ms ago", " 3 "} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("the first worker's line lacks %q:\n%s", want, lines[1])
		}
	}
	if !strings.HasSuffix(lines[1], " -") {
		t.Errorf("a worker taking work: want - under PAUSED, got\n%s", lines[1])
	}
	for _, want := range []string{"vm-2", "40ms ago", "until 2026-12-06 18:00:30: \\x1b[2Jpreparing directories: mkdir /var/lib/gpuq/x: no space …"} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("the paused worker's line lacks %q:\n%s", want, lines[2])
		}
	}
}

// Status lists what a job reads, the outputs of other jobs with their name
// and state now, and says how its end's post to its webhook went.
func TestStatusSaysWhatAJobReadsAndHowItsEndWasPosted(t *testing.T) {
	prep := uuid.MustParse("01a25057-59e8-75a3-b0b2-9bc2cbdddf98")
	ended := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	spec, err := queue.ParseSpec([]byte(`command: [train]
inputs:
  - {name: imagenet, uri: "s3://bucket/imagenet", provider: aws, region: eu-central-1, bytes: 1000}
  - {name: prep, job: ` + prep.String() + `}
notify: {webhook: SLACK_HOOK, when: [failed, dead]}
`))
	if err != nil {
		t.Fatal(err)
	}
	job := &queue.Job{State: queue.StateFailed, Spec: spec, FinalizedAt: &ended}
	for _, tc := range []struct {
		name string
		st   JobStatus
		want []string
	}{
		{"tried and failing", JobStatus{After: []queue.Dependency{{ID: prep, Name: "prep", State: queue.StateSucceeded}},
			Notification: &queue.Notification{State: queue.StateFailed, EndedAt: ended, Outcome: queue.NotifyPending, Tries: 2,
				NextAt: ptr(ended.Add(10 * time.Second)), Error: "posting to hooks.slack.com: HTTP 503: busy"}},
			[]string{"\ninput      imagenet: s3://bucket/imagenet (aws eu-central-1)\n",
				"\ninput      prep: the outputs of job " + prep.String() + " (prep), succeeded, in $GPUQ_INPUT_DIR/prep\n",
				"\nnotify     webhook SLACK_HOOK when failed or dead: try 2 failed: posting to hooks.slack.com: HTTP 503: busy; next try at "}},
		{"not tried yet", JobStatus{}, []string{"\nnotify     webhook SLACK_HOOK when failed or dead: posting this end\n"}},
		{"given up", JobStatus{Notification: &queue.Notification{State: queue.StateFailed, EndedAt: ended, Outcome: queue.NotifyFailed, Tries: 1,
			HTTPStatus: 404, Error: "posting to hooks.slack.com: HTTP 404: no_service"}},
			[]string{"\nnotify     webhook SLACK_HOOK when failed or dead: not delivered: posting to hooks.slack.com: HTTP 404: no_service\n"}},
	} {
		tc.st.Job = job
		var out strings.Builder
		if err := printStatus(&out, &tc.st); err != nil {
			t.Fatal(err)
		}
		for _, want := range tc.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: status printed\n%s\nwant %q", tc.name, out.String(), want)
			}
		}
	}
	running := &queue.Job{State: queue.StateRunning, Spec: spec}
	var out strings.Builder
	if err := printStatus(&out, &JobStatus{Job: running}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "\nnotify     webhook SLACK_HOOK when failed or dead\n") ||
		!strings.Contains(out.String(), "\ninput      prep: the outputs of job "+prep.String()+", in $GPUQ_INPUT_DIR/prep\n") {
		t.Errorf("a running job's status:\n%s", out.String())
	}

	// Placed under a residency, the job's output stays out of its posts.
	talk, err := queue.ParseSpec([]byte("command: [train]\nnotify: {webhook: SLACK_HOOK, log_lines: 20}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		residency policy.ResidencyDecision
		want      string
	}{
		{policy.ResidencyDecision{}, "\nnotify     webhook SLACK_HOOK at every end, with its last 20 lines of output\n"},
		{policy.ResidencyDecision{Class: "EU", Countries: []string{"DE", "FR"}, ImposedBy: []string{"rule personal-data"}},
			"\nnotify     webhook SLACK_HOOK at every end, without its last 20 lines of output (the job is kept in residency EU)\n"},
	} {
		decision, err := json.Marshal(policy.Compact{Chosen: &policy.Candidate{}, Residency: tc.residency})
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		st := &JobStatus{Job: &queue.Job{State: queue.StateRunning, Spec: talk, Pool: "p", PlacementVersion: 1}, Pool: "p", Placement: decision}
		if err := printStatus(&out, st); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("status printed\n%s\nwant %q", out.String(), tc.want)
		}
	}
}
