package cli

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/workers"
)

// natsJobs serves the job commands through the control plane's client
// service (NATS request/reply): the CLI holds a NATS credential and no key
// to PostgreSQL. Each call is made for one of the caller's projects; a job
// of another project is not found.
type natsJobs struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	projects []string

	mu sync.Mutex
	// owner remembers the project a job was found in.
	owner map[uuid.UUID]string
	// timeout bounds a call past how long the control plane may hold it;
	// default callTimeout. poll is how long a wait is held; default
	// waitPoll.
	timeout, poll time.Duration
}

// How long a natsJobs call waits on the control plane: a wait request is
// held open for waitPoll, a job request waits up to recordWait for a job
// just submitted to be recorded.
const (
	waitPoll    = 20 * time.Second
	recordWait  = 10 * time.Second
	callTimeout = 30 * time.Second
	// noResponderWait is how long a call waits for a control plane to
	// answer at all before saying none runs.
	noResponderWait = 5 * time.Second
	// logPoll is how often a followed log asks for new output.
	logPoll = time.Second
)

// submitterUser is the NATS user name prefix of a submitter credential:
// submitter.<project>[.<project>…].
const submitterUser = "submitter."

// callerProjects are the projects the job commands act in: --project when
// given, else the projects the NATS credential is scoped to, else the
// config key `projects`, else the default project. user is the NATS user
// name of the caller's credential.
func callerProjects(v *viper.Viper, user string) ([]string, error) {
	var scoped []string
	if strings.HasPrefix(user, submitterUser) {
		scoped = strings.Split(strings.TrimPrefix(user, submitterUser), ".")
	}
	if p := v.GetString("project"); p != "" {
		if err := queue.ValidateProject(p); err != nil {
			return nil, fmt.Errorf("--project: %w", err)
		}
		if scoped != nil && !slices.Contains(scoped, p) {
			return nil, fmt.Errorf("--project: %q is not one of this NATS credential's projects (%s)", p, strings.Join(scoped, ", "))
		}
		return []string{p}, nil
	}
	if scoped != nil {
		return scoped, nil
	}
	projects := v.GetStringSlice("projects")
	for i, p := range projects {
		if err := queue.ValidateProject(p); err != nil {
			return nil, fmt.Errorf("projects[%d]: %w", i, err)
		}
	}
	if len(projects) > 0 {
		return projects, nil
	}
	return []string{queue.DefaultProject}, nil
}

// newNATSJobs connects to NATS for the job commands.
func newNATSJobs(v *viper.Viper) (*natsJobs, error) {
	natsURL, err := required(v, "nats-url")
	if err != nil {
		return nil, err
	}
	auth, user, err := natsOptions(v, natsURL)
	if err != nil {
		return nil, err
	}
	projects, err := callerProjects(v, user)
	if err != nil {
		return nil, err
	}
	opts := append([]nats.Option{nats.Name("gpuq"), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}, auth...)
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		return nil, redactErr(fmt.Errorf("connecting to NATS at %s: %w", redactURL(natsURL), err), natsURL)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &natsJobs{nc: nc, js: js, projects: projects, owner: map[uuid.UUID]string{}}, nil
}

func (n *natsJobs) Close() { drainNATS(n.nc, natsDrainWait) }

// call sends one request for project and decodes its answer into out (a
// *[]byte takes it raw).
func (n *natsJobs) call(ctx context.Context, project, op string, req queue.ClientRequest, out any) error {
	// A control plane that took the request and died never answers it.
	ctx, cancel := context.WithTimeout(ctx, req.Wait+cmp.Or(n.timeout, callTimeout))
	defer cancel()
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	subject := queue.ClientServiceSubject(project, op)
	msg, err := n.nc.RequestWithContext(ctx, subject, body)
	// No responder means no server took the request (one is starting or
	// restarting): asking again is safe, for a while, with capped
	// exponential backoff and jitter.
	for pause, until := 50*time.Millisecond, time.Now().Add(noResponderWait); errors.Is(err, nats.ErrNoResponders) && time.Now().Before(until); pause = min(2*pause, time.Second) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause/2 + rand.N(pause/2)):
		}
		msg, err = n.nc.RequestWithContext(ctx, subject, body)
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return &noControlPlaneError{subject: subject}
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return fmt.Errorf("%s: %w", subject, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return &control.ClientError{Code: code, Message: msg.Header.Get(micro.ErrorHeader)}
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = msg.Data
		return nil
	}
	if err := json.Unmarshal(msg.Data, out); err != nil {
		return fmt.Errorf("%s: reading the answer: %w", subject, err)
	}
	return nil
}

// jobCall makes a call about one job in the project it belongs to: the one
// it was found in before, else each of the caller's projects in turn.
func (n *natsJobs) jobCall(ctx context.Context, op string, req queue.ClientRequest, out any) error {
	n.mu.Lock()
	owner, known := n.owner[req.JobID]
	n.mu.Unlock()
	if known {
		return n.call(ctx, owner, op, req, out)
	}
	var err error
	for _, p := range n.projects {
		if err = n.call(ctx, p, op, req, out); !errors.Is(err, queue.ErrNotFound) {
			if err == nil {
				n.mu.Lock()
				n.owner[req.JobID] = p
				n.mu.Unlock()
			}
			return err
		}
	}
	return err
}

func (n *natsJobs) Submit(ctx context.Context, spec *queue.Spec) (*queue.Job, error) {
	sub, err := queue.Submit(ctx, n.js, spec)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.owner[sub.JobID] = spec.Project
	n.mu.Unlock()
	return &queue.Job{ID: sub.JobID, Project: spec.Project, Name: spec.Name, IdempotencyKey: spec.IdempotencyKey,
		Spec: spec, State: queue.StatePending, SubmittedAt: time.Now().UTC()}, nil
}

func (n *natsJobs) Job(ctx context.Context, id uuid.UUID) (*queue.Job, error) {
	var job queue.Job
	return &job, n.jobCall(ctx, queue.ClientOpJob, queue.ClientRequest{JobID: id, Wait: recordWait}, &job)
}

func (n *natsJobs) Status(ctx context.Context, id uuid.UUID) (*control.JobStatus, error) {
	var st control.JobStatus
	return &st, n.jobCall(ctx, queue.ClientOpStatus, queue.ClientRequest{JobID: id}, &st)
}

func (n *natsJobs) Explain(ctx context.Context, id uuid.UUID) (*policy.Decision, error) {
	var d policy.Decision
	return &d, n.jobCall(ctx, queue.ClientOpExplain, queue.ClientRequest{JobID: id}, &d)
}

// List lists the jobs of each of the caller's projects, following their
// pages, and merges them, newest first.
func (n *natsJobs) List(ctx context.Context, f listFilter) (*JobPage, error) {
	projects := n.projects
	if f.Project != "" {
		projects = []string{f.Project}
	}
	page := &JobPage{Jobs: []*queue.Job{}}
	for _, p := range projects {
		req := queue.ClientRequest{State: f.State, Label: f.Label, Since: f.Since, RunsAfter: f.RunsAfter, Pool: f.Pool}
		for got := 0; got < f.Limit; {
			req.Limit = min(maxListPage, f.Limit-got)
			var list queue.ClientJobList
			if err := n.call(ctx, p, queue.ClientOpList, req, &list); err != nil {
				return nil, err
			}
			page.Jobs = append(page.Jobs, list.Jobs...)
			got += len(list.Jobs)
			if list.NextCursor == "" || len(list.Jobs) == 0 {
				break
			}
			req.Cursor = list.NextCursor
		}
	}
	sort.SliceStable(page.Jobs, func(i, j int) bool { return page.Jobs[i].SubmittedAt.After(page.Jobs[j].SubmittedAt) })
	if len(page.Jobs) > f.Limit {
		page.Jobs = page.Jobs[:f.Limit]
	}
	return page, nil
}

func (n *natsJobs) Count(ctx context.Context, f listFilter) (*queue.JobCounts, error) {
	projects := n.projects
	if f.Project != "" {
		projects = []string{f.Project}
	}
	sum := queue.NoJobs()
	req := queue.ClientRequest{State: f.State, Label: f.Label, Since: f.Since, RunsAfter: f.RunsAfter, Pool: f.Pool}
	for _, p := range projects {
		var c queue.JobCounts
		if err := n.call(ctx, p, queue.ClientOpCount, req, &c); err != nil {
			return nil, err
		}
		sum.Add(c)
	}
	return &sum, nil
}

// noControlPlaneError is a request that no control plane took for
// noResponderWait.
type noControlPlaneError struct{ subject string }

func (e *noControlPlaneError) Error() string {
	return fmt.Sprintf("no gpuq control plane answers on %s: is `gpuq server` (or `gpuq dev`) running against this NATS server?", e.subject)
}

func (e *noControlPlaneError) Unwrap() error { return nats.ErrNoResponders }

// serverGone tells, while ctx lasts, a call whose control plane went away
// without an answer, or, once one answered (answered), a call that no
// control plane took because they are all restarting: a follower asks
// again. A first call that none takes is an error (none runs).
func serverGone(ctx context.Context, err error, answered bool) bool {
	return ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || answered && errors.Is(err, nats.ErrNoResponders))
}

// Events asks the control plane for the job's state changes, holding each
// request open until there is one: the control plane follows the job's
// event stream and, when the stream is quiet, reads the job's audit trail
// again, so a lost event never holds the waiter.
func (n *natsJobs) Events(ctx context.Context, id uuid.UUID, fn func(queue.Event) bool) error {
	req := queue.ClientRequest{JobID: id}
	for {
		first := req.Wait == 0 // the first request, answered at once
		var w queue.ClientWait
		if err := n.jobCall(ctx, queue.ClientOpWait, req, &w); err != nil {
			if serverGone(ctx, err, !first) {
				continue // another server takes the wait up from the same point
			}
			return err
		}
		evs := w.Events
		if first && len(evs) > 1 {
			evs = evs[len(evs)-1:] // the latest state change, then each later one
		}
		for _, ev := range evs {
			if !fn(ev) || ev.Ends() {
				return nil
			}
		}
		if w.Job == nil || w.Job.State.Terminal() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		req.Seen, req.Wait = w.Seen, cmp.Or(n.poll, waitPoll)
	}
}

func (n *natsJobs) Logs(ctx context.Context, id uuid.UUID, r logRead, fn func(queue.LogChunk) error) error {
	follow := r.Follow
	req := queue.ClientRequest{JobID: id, Limit: queue.MaxClientLogChunks, Tail: r.Tail, Attempt: r.Attempt}
	if r.Tail == 0 {
		req.Attempt = 0
	}
	answered := false
	for {
		var page queue.ClientLogPage
		if err := n.jobCall(ctx, queue.ClientOpLogs, req, &page); err != nil {
			if follow && serverGone(ctx, err, answered) {
				continue // another server goes on after the last chunk
			}
			return err
		}
		answered = true
		// The tail sets where the output begins; the next pages go on
		// from NextAfter.
		req.Tail, req.Attempt = 0, 0
		for _, c := range page.Chunks {
			if err := fn(queue.LogChunk{Attempt: c.Attempt, Stream: c.Stream, Data: []byte(c.Data)}); err != nil {
				return err
			}
		}
		req.After = page.NextAfter
		if page.More {
			continue
		}
		if !follow || page.Done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(logPoll):
		}
	}
}

func (n *natsJobs) Cancel(ctx context.Context, id uuid.UUID) (*queue.Job, error) {
	var job queue.Job
	return &job, n.jobCall(ctx, queue.ClientOpCancel, queue.ClientRequest{JobID: id}, &job)
}

func (n *natsJobs) Retry(ctx context.Context, id uuid.UUID, fresh bool) (*queue.Job, error) {
	var job queue.Job
	return &job, n.jobCall(ctx, queue.ClientOpRetry, queue.ClientRequest{JobID: id, Fresh: fresh}, &job)
}

// download copies the size bytes of a job's outputs archive to w, one
// bounded read of the client service after the other.
func (n *natsJobs) download(ctx context.Context, id uuid.UUID, size int64, w io.Writer) error {
	for off := int64(0); off < size; {
		var chunk []byte
		if err := n.jobCall(ctx, queue.ClientOpArchive, queue.ClientRequest{JobID: id, Offset: off, Limit: queue.MaxClientArchiveChunk}, &chunk); err != nil {
			return fmt.Errorf("downloading the outputs of job %s: %w", id, err)
		}
		if len(chunk) == 0 || int64(len(chunk)) > size-off {
			return fmt.Errorf("downloading the outputs of job %s: %d bytes at offset %d of %d", id, len(chunk), off, size)
		}
		if _, err := w.Write(chunk); err != nil {
			return err
		}
		off += int64(len(chunk))
	}
	return nil
}

// Results downloads a succeeded job's output archive in ranges, checks its
// hash and unpacks it into dir.
func (n *natsJobs) Results(ctx context.Context, id uuid.UUID, dir string, lim queue.ArchiveLimits, shown *transfer) (*Results, error) {
	var rec queue.ClientResults
	if err := n.jobCall(ctx, queue.ClientOpResults, queue.ClientRequest{JobID: id}, &rec); err != nil {
		return nil, err
	}
	out := &Results{JobID: id, Files: []ResultFile{}, Bytes: rec.Bytes, SHA256: rec.SHA256, Region: rec.Region}
	if rec.SHA256 == "" {
		return out, nil
	}
	f, err := os.CreateTemp("", "gpuq-results-*.tar.zst")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	err = n.download(ctx, id, rec.Bytes, io.MultiWriter(f, h, shown.writer(rec.Bytes)))
	shown.close()
	if err != nil {
		return nil, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != rec.SHA256 {
		return nil, fmt.Errorf("outputs of job %s: downloaded sha256 %s, recorded %s", id, got, rec.SHA256)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := workers.Unpack(f, dir, lim); err != nil {
		return nil, err
	}
	out.Files, err = listFiles(dir)
	return out, err
}

func (n *natsJobs) Workers(ctx context.Context, pool string) ([]queue.LiveWorker, error) {
	var workers []queue.LiveWorker
	return workers, n.call(ctx, n.projects[0], queue.ClientOpWorkers, queue.ClientRequest{Pool: pool}, &workers)
}

func (n *natsJobs) Nodes(ctx context.Context, pool string) ([]*queue.Node, error) {
	var nodes []*queue.Node
	return nodes, n.call(ctx, n.projects[0], queue.ClientOpNodes, queue.ClientRequest{Pool: pool}, &nodes)
}
