package cli

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
)

// gpuq ls filters by label and submission time and lists past one page,
// over the HTTP API and over NATS alike: 560 jobs labelled sweep=a (more
// than one page of 500), 60 labelled sweep=b, and 5 submitted after a
// moment --since names.
func TestLsFiltersByLabelAndTimeAndFollowsPagesOverHTTPAndNATS(t *testing.T) {
	t.Parallel()
	l := startListing(t, queue.RoleRead)
	l.record(560, "a")
	l.record(60, "b")
	time.Sleep(50 * time.Millisecond)
	since := time.Now()
	time.Sleep(50 * time.Millisecond)
	late := l.record(5, "b")

	transports := l.transports
	for name, config := range transports {
		ls := func(args ...string) []*queue.Job {
			t.Helper()
			out, errOut, err := runCLI(t, append([]string{"ls", "--config", config, "-o", "json"}, args...)...)
			if err != nil {
				t.Fatalf("%s: gpuq ls %s: %v\n%s", name, strings.Join(args, " "), err, errOut)
			}
			var page JobPage
			if err := json.Unmarshal([]byte(out), &page); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, out)
			}
			return page.Jobs
		}
		count := func(jobs []*queue.Job, label string) int {
			n := 0
			for _, j := range jobs {
				if j.Spec.Labels["sweep"] == label {
					n++
				}
			}
			return n
		}
		if jobs := ls("--label", "sweep=a", "--limit", "1000"); len(jobs) != 560 || count(jobs, "a") != 560 {
			t.Errorf("%s: --label sweep=a --limit 1000: want the 560 jobs of sweep a, got %d (%d of a)", name, len(jobs), count(jobs, "a"))
		}
		if jobs := ls("--limit", "600"); len(jobs) != 600 || distinct(jobs) != 600 || !newestFirst(jobs) || !slices.Contains(late, jobs[0].ID) {
			t.Errorf("%s: --limit 600: want 600 distinct jobs newest first, got %d (%d distinct)", name, len(jobs), distinct(jobs))
		}
		if jobs := ls("--label", "sweep=b", "--since", since.UTC().Format(time.RFC3339Nano)); len(jobs) != 5 || count(jobs, "b") != 5 {
			t.Errorf("%s: --since: want the 5 late jobs, got %d", name, len(jobs))
		}
		if jobs := ls("--since", "1h", "--label", "sweep=b"); len(jobs) != 50 {
			t.Errorf("%s: --since 1h: want the default limit of 50 of sweep b's 65, got %d", name, len(jobs))
		}
		if jobs := ls("--label", "sweep=c"); len(jobs) != 0 {
			t.Errorf("%s: --label sweep=c: want none, got %d", name, len(jobs))
		}
		// The table says when it left jobs out, and only then.
		for _, tc := range []struct {
			args string
			rows int
			more bool
		}{{"--label sweep=b", 50, true}, {"--label sweep=b --limit 65", 65, false}, {"--label sweep=b --limit 64", 64, true}} {
			out, errOut, err := runCLI(t, append([]string{"ls", "--config", config}, strings.Fields(tc.args)...)...)
			rows := strings.Count(out, "\n") - 1
			if err != nil || rows != tc.rows || strings.Contains(errOut, "more jobs match") != tc.more {
				t.Errorf("%s: gpuq ls %s: want %d rows and more jobs said to match: %v; got %v, %d rows, stderr %q", name, tc.args, tc.rows, tc.more, err, rows, errOut)
			}
		}
	}
	for _, tc := range []struct{ args, want string }{
		{"--label sweep", `--label: want key=value, got "sweep"`},
		{"--since yesterday", `--since: want an RFC 3339 time such as 2026-01-02T15:04:05Z or a duration such as 24h, got "yesterday"`},
		{"--limit 10001", "--limit: must be 1–10000, got 10001"},
	} {
		_, _, err := runCLI(t, append([]string{"ls", "--config", transports["HTTP"]}, strings.Fields(tc.args)...)...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("gpuq ls %s: want %q, got %v", tc.args, tc.want, err)
		}
	}
}

func distinct(jobs []*queue.Job) int {
	seen := map[uuid.UUID]bool{}
	for _, j := range jobs {
		seen[j.ID] = true
	}
	return len(seen)
}

func newestFirst(jobs []*queue.Job) bool {
	for i := 1; i < len(jobs); i++ {
		if jobs[i].SubmittedAt.After(jobs[i-1].SubmittedAt) {
			return false
		}
	}
	return true
}

// listing is a store with the client service and the HTTP API in front of
// it, and a client config for each: "HTTP" (a token of the project
// default) and "NATS" (a submitter credential of default).
type listing struct {
	s          *store.Store
	transports map[string]string
}

func startListing(t *testing.T, role queue.Role) *listing {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	startClientService(ctx, t, n, s)
	ts, secret := serveAPI(ctx, t, n, s, role)
	cred, err := n.Server.Issuer.Issue(queue.RoleUser(queue.RoleSubmitter, "default"))
	if err != nil {
		t.Fatal(err)
	}
	return &listing{s: s, transports: map[string]string{
		"HTTP": writeFile(t, "http.yaml", "url: "+ts.URL+"\ntoken: "+secret+"\n"),
		"NATS": writeFile(t, "nats.yaml", "nats-url: "+n.Server.URL()+"\nnats-credential: "+cred.String()+"\n"),
	}}
}

// record records count jobs labelled sweep=label, not yet placed.
func (l *listing) record(count int, label string) []uuid.UUID {
	var batch []queue.NewJob
	var ids []uuid.UUID
	for range count {
		spec, err := queue.ParseSpec([]byte("command: [/bin/true]\nlabels: {sweep: " + label + "}\n"))
		if err != nil {
			panic(err)
		}
		id := uuid.New()
		batch, ids = append(batch, queue.NewJob{ID: id, Spec: spec}), append(ids, id)
	}
	if _, _, err := l.s.RecordAndPlace(context.Background(), batch, queue.Decided{}); err != nil {
		panic(err)
	}
	return ids
}

// gpuq cancel takes several job ids, or a label: over the HTTP API and over
// NATS alike it cancels each unfinished job named or labelled, leaves the
// others alone, names on stderr a job it could not cancel, and fails once
// it has tried them all.
func TestCancelTakesSeveralJobsOrALabel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := startListing(t, queue.RoleSubmit)
	for name, config := range l.transports {
		sweep, other := l.record(3, name+"-sweep"), l.record(2, name+"-other")
		finished := l.record(1, name+"-sweep")[0]
		if err := l.s.Cancel(ctx, finished, "cancelled by the test"); err != nil {
			t.Fatal(err)
		}
		out, errOut, err := runCLI(t, "cancel", "--config", config, "--label", "sweep="+name+"-sweep")
		if err != nil {
			t.Fatalf("%s: cancel --label: %v\n%s", name, err, errOut)
		}
		for _, id := range sweep {
			if !strings.Contains(out, id.String()+" cancelled") {
				t.Errorf("%s: cancel --label: want %s cancelled, got:\n%s", name, id, out)
			}
		}
		if strings.Contains(out, finished.String()) || errOut != "" {
			t.Errorf("%s: cancel --label: the finished job is not listed, nor an error: %q %q", name, out, errOut)
		}
		missing := uuid.New()
		out, errOut, err = runCLI(t, "cancel", "--config", config, other[0].String(), missing.String(), sweep[0].String(), other[1].String())
		if exitCode(err) != 1 || !strings.Contains(err.Error(), "2 of 4 jobs not cancelled") {
			t.Errorf("%s: cancel of 4 ids of which 2 cannot be: want exit 1, got %v", name, err)
		}
		for _, want := range []string{"job " + missing.String() + " not found", "job " + sweep[0].String() + " already finished: cancelled"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%s: want %q on stderr, got %q", name, want, errOut)
			}
		}
		for _, id := range append(append([]uuid.UUID{}, sweep...), other...) {
			if j, err := l.s.Job(ctx, id); err != nil || j.State != queue.StateCancelled {
				t.Errorf("%s: job %s: want cancelled, got %v %v", name, id, j, err)
			}
		}
		if _, _, err := runCLI(t, "cancel", "--config", config, missing.String(), uuid.NewString()); exitCode(err) != ExitNotFound {
			t.Errorf("%s: cancel of jobs none of which exists: want exit %d, got %v", name, ExitNotFound, err)
		}
	}
	for _, tc := range []struct{ args, want string }{
		{"", "cancel takes job ids or --label KEY=VALUE"},
		{"--label sweep=a " + uuid.NewString(), "cancel takes job ids or --label, not both"},
		{"--label sweep", `--label: want key=value, got "sweep"`},
	} {
		_, _, err := runCLI(t, append([]string{"cancel", "--config", l.transports["HTTP"]}, strings.Fields(tc.args)...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gpuq cancel %s: want %q, got %v", tc.args, tc.want, err)
		}
	}
}
