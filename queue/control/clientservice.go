package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/gpuq/gpuq/queue"
)

// ClientServiceStore is what the client service reads and changes in the
// system of record.
type ClientServiceStore interface {
	ClientStore
	DecisionReplays
	ListPage(ctx context.Context, p queue.Page) ([]*queue.Job, error)
	CountJobs(ctx context.Context, p queue.Page) (queue.JobCounts, error)
	Nodes(ctx context.Context, pool string) ([]*queue.Node, error)
}

// LogStreams is the part of JetStream that reads a job's stored output.
type LogStreams interface {
	queue.OrderedConsumers
	Stream(ctx context.Context, name string) (jetstream.Stream, error)
}

// ArchiveReader reads packed archives (job outputs) from their store.
type ArchiveReader interface {
	Get(ctx context.Context, uri string, w io.Writer) error
}

// ClientService serves the client operations over NATS request/reply on
// gpuq.svc.client.<project>.<op>, so that CLI commands and scripts reach
// jobs with a NATS credential scoped to their projects and never hold a key
// to PostgreSQL. Every control plane serves it in one queue group. The
// project in the subject scopes every call: a job of another project
// answers "not found", as a job that does not exist does.
type ClientService struct {
	NATS     *nats.Conn
	Store    ClientServiceStore
	JS       LogStreams
	Archives ArchiveReader
	// Concurrency bounds the requests handled at once. Default 64.
	Concurrency int
	// Quiet is how long a wait request follows the job's event stream
	// without news before it reads the job's audit trail from the system
	// of record again, so that a lost event delays a waiter by at most
	// Quiet. Default 5s.
	Quiet time.Duration
	// Workers, when set, counts the live workers of each pool, for the
	// status of a placed job.
	Workers *LiveWorkers
	// Placer and Runs place and dispatch the jobs a caller retries; a
	// service without them answers a retry with 501.
	Placer Placer
	Runs   RunPublisher
	// Workdirs, when set, keeps a retry of a job whose working directory
	// is gone from placing it (Client.Workdirs).
	Workdirs *Workdirs
	// Logger; default slog.Default().
	Logger *slog.Logger

	client *Client
	slots  chan struct{}
}

// Start serves the client service until ctx ends.
func (s *ClientService) Start(ctx context.Context) (micro.Service, error) {
	if s.NATS == nil || s.Store == nil || s.JS == nil || s.Archives == nil {
		return nil, errors.New("client service: NATS, Store, JS and Archives must be set")
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Concurrency <= 0 {
		s.Concurrency = 64
	}
	if s.Quiet <= 0 {
		s.Quiet = 5 * time.Second
	}
	s.client = &Client{Store: s.Store, JS: s.JS, NATS: s.NATS, Workers: s.Workers, Placer: s.Placer, Runs: s.Runs, Workdirs: s.Workdirs}
	s.slots = make(chan struct{}, s.Concurrency)
	svc, err := micro.AddService(s.NATS, micro.Config{
		Name: queue.ClientServiceName, Version: "1.0.0", QueueGroup: queue.ClientQueueGroup,
		Description: "gpuq jobs' status, listings, logs, results, cancellation, retries and waiting, scoped by project",
	})
	if err != nil {
		return nil, fmt.Errorf("client service: %w", err)
	}
	// Requests already taken finish after a stop; each is bounded by its
	// own timeout.
	serve := context.WithoutCancel(ctx)
	var inflight taken
	for _, op := range queue.ClientOps {
		err := svc.AddEndpoint(op, micro.HandlerFunc(func(req micro.Request) {
			inflight.take()
			s.slots <- struct{}{}
			go func() {
				defer inflight.done()
				defer func() { <-s.slots }()
				s.serve(serve, op, req)
			}()
		}), micro.WithEndpointSubject(queue.ClientServicePrefix+".*."+op))
		if err != nil {
			svc.Stop() //nolint:errcheck // failing anyway
			return nil, fmt.Errorf("client service endpoint %s: %w", op, err)
		}
	}
	go func() {
		<-ctx.Done()
		svc.Stop() //nolint:errcheck // the connection may be closing
		inflight.wait()
	}()
	return svc, nil
}

// ClientError is a client service error answer: Code is an HTTP status
// code ("400", "404", "409", "422", "500", "501") in the micro error header.
type ClientError struct {
	Code    string
	Message string
}

func (e *ClientError) Error() string { return e.Message }

// Is makes a 404 match queue.ErrNotFound.
func (e *ClientError) Is(target error) bool {
	return target == queue.ErrNotFound && e.Code == "404"
}

func clientErr(code, format string, args ...any) *ClientError {
	return &ClientError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// clientTimeout bounds the work of one request beyond its own wait.
const clientTimeout = 30 * time.Second

func (s *ClientService) serve(ctx context.Context, op string, req micro.Request) {
	ctx, cancel := context.WithTimeout(ctx, queue.MaxClientWait+clientTimeout)
	defer cancel()
	reply, err := s.handle(ctx, op, req.Subject(), req.Data())
	// The answer is published on the request's reply subject directly, not
	// through req: the request is served after its micro handler returned,
	// and micro reads req's error fields then.
	msg := &nats.Msg{Subject: req.Reply(), Header: nats.Header{}}
	if err == nil {
		if raw, ok := reply.([]byte); ok {
			msg.Data = raw
		} else if msg.Data, err = json.Marshal(reply); err != nil {
			err = fmt.Errorf("encoding the answer: %w", err)
		}
	}
	if err != nil {
		var ce *ClientError
		if !errors.As(err, &ce) {
			s.Logger.Error("client service", "op", op, "subject", req.Subject(), "err", err)
			ce = clientErr("500", "internal error while serving %s; the server's log has the cause", op)
		}
		msg.Data = nil
		msg.Header.Set(micro.ErrorHeader, oneLine(ce.Message))
		msg.Header.Set(micro.ErrorCodeHeader, ce.Code)
	}
	if msg.Subject == "" {
		return
	}
	if err := s.NATS.PublishMsg(msg); err != nil {
		s.Logger.Warn("client service: replying", "op", op, "err", err)
	}
}

// oneLine makes a message fit a header value.
func oneLine(s string) string {
	s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	if len(s) > 2000 {
		s = s[:2000]
	}
	return s
}

// handle checks a request against its subject and does what it asks.
func (s *ClientService) handle(ctx context.Context, op, subject string, data []byte) (any, error) {
	project, subOp, ok := queue.ClientSubjectParts(subject)
	if !ok || subOp != op {
		return nil, clientErr("400", "subject %q: not a client service subject (want %s.<project>.%s)", subject, queue.ClientServicePrefix, op)
	}
	if len(data) > queue.MaxClientRequest {
		return nil, clientErr("400", "request: %d bytes, over the limit of %d", len(data), queue.MaxClientRequest)
	}
	var r queue.ClientRequest
	if len(data) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return nil, clientErr("400", "request: %v", err)
		}
	}
	switch {
	case r.Limit < 0:
		return nil, clientErr("400", "limit: must not be negative, got %d", r.Limit)
	case r.Offset < 0:
		return nil, clientErr("400", "offset: must not be negative, got %d", r.Offset)
	case r.Seen < 0:
		return nil, clientErr("400", "seen: must not be negative, got %d", r.Seen)
	case r.Wait < 0 || r.Wait > queue.MaxClientWait:
		return nil, clientErr("400", "wait: must be 0–%s, got %s", queue.MaxClientWait, r.Wait)
	case len(r.Pool) > 64:
		return nil, clientErr("400", "pool: at most 64 characters, got %d", len(r.Pool))
	case r.Tail < 0 || r.Tail > queue.MaxLogTail:
		return nil, clientErr("400", "tail: must be 0–%d lines, got %d", queue.MaxLogTail, r.Tail)
	case r.Attempt < 0:
		return nil, clientErr("400", "attempt: must not be negative, got %d", r.Attempt)
	}
	switch op {
	case queue.ClientOpList:
		return s.list(ctx, project, r)
	case queue.ClientOpCount:
		return s.count(ctx, project, r)
	case queue.ClientOpNodes:
		nodes, err := s.Store.Nodes(ctx, r.Pool)
		if nodes == nil {
			nodes = []*queue.Node{}
		}
		return nodes, err
	case queue.ClientOpWorkers:
		return s.Workers.List(r.Pool), nil
	}
	if r.JobID == uuid.Nil {
		return nil, clientErr("400", "job_id: required")
	}
	job, err := s.ownJob(ctx, project, r.JobID, r.Wait)
	if err != nil {
		return nil, err
	}
	switch op {
	case queue.ClientOpJob:
		return job, nil
	case queue.ClientOpStatus:
		st, err := s.client.Status(ctx, job.ID)
		if err != nil {
			return nil, err
		}
		if st.Attempts == nil {
			st.Attempts = []queue.Attempt{}
		}
		if st.History == nil {
			st.History = []queue.Event{}
		}
		return st, nil
	case queue.ClientOpExplain:
		d, err := Explain(ctx, s.Store, job.ID)
		switch {
		case errors.Is(err, queue.ErrNotFound):
			return nil, clientErr("404", "job %s has not been placed", job.ID)
		case errors.Is(err, ErrNoReplay):
			return nil, clientErr("404", "job %s: %v", job.ID, err)
		}
		return d, err
	case queue.ClientOpCheckpoints:
		cps, err := s.Store.Checkpoints(ctx, job.ID)
		if cps == nil {
			cps = []queue.Checkpoint{}
		}
		return cps, err
	case queue.ClientOpCancel:
		if job.State.Terminal() {
			return nil, clientErr("409", "job %s already finished: %s", job.ID, job.State)
		}
		if err := s.client.Cancel(ctx, job.ID); err != nil {
			if strings.Contains(err.Error(), "already finished") {
				return nil, clientErr("409", "%s", err.Error())
			}
			return nil, err
		}
		return s.Store.Job(ctx, job.ID)
	case queue.ClientOpRetry:
		return s.retry(ctx, job.ID, r.Fresh)
	case queue.ClientOpLogs:
		return s.logs(ctx, job, r)
	case queue.ClientOpResults:
		rec, err := s.result(ctx, job)
		if err != nil || rec == nil {
			return &queue.ClientResults{JobID: job.ID}, err
		}
		return &queue.ClientResults{JobID: job.ID, Bytes: rec.Bytes, SHA256: rec.SHA256, Region: rec.Region}, nil
	case queue.ClientOpArchive:
		return s.archive(ctx, job, r)
	case queue.ClientOpWait:
		return s.wait(ctx, job, r)
	}
	return nil, clientErr("400", "op %q: unknown", op)
}

// retry answers a retry: 409 for a job that may not be retried, 422 when
// no placement takes it now, 501 on a service that does not place jobs.
func (s *ClientService) retry(ctx context.Context, id uuid.UUID, fresh bool) (*queue.Job, error) {
	job, err := s.client.Retry(ctx, id, fresh)
	var nr *queue.NotRetryableError
	var rej *queue.RejectionError
	switch {
	case errors.As(err, &nr):
		return nil, clientErr("409", "job %s cannot be retried: %v", id, nr)
	case errors.As(err, &rej):
		return nil, clientErr("422", "job %s cannot be placed now, so it was not retried: %s", id, rej.Reason)
	case errors.Is(err, ErrRetryUnavailable):
		return nil, clientErr("501", "%v", err)
	}
	return job, err
}

// ownJob returns the job when it belongs to project, else not found. With
// wait, a job not yet recorded is waited for up to wait.
func (s *ClientService) ownJob(ctx context.Context, project string, id uuid.UUID, wait time.Duration) (*queue.Job, error) {
	var job *queue.Job
	var err error
	if wait > 0 {
		c := *s.client
		c.RecordWait = wait
		job, err = c.Job(ctx, id)
	} else {
		job, err = s.Store.Job(ctx, id)
	}
	if errors.Is(err, queue.ErrNotFound) || err == nil && job.Project != project {
		return nil, clientErr("404", "job %s not found", id)
	}
	return job, err
}

// filter is the listing of project's jobs r's filters (state, label,
// since, runs_after, pool) select.
func filter(project string, r queue.ClientRequest) (queue.Page, error) {
	if r.State != "" && !ValidState(r.State) {
		return queue.Page{}, clientErr("400", "state: must be one of pending, waiting, placed, running, succeeded, failed, cancelled, rejected, dead; got %q", r.State)
	}
	p := queue.Page{Projects: []string{project}, State: r.State, Since: r.Since, RunsAfter: r.RunsAfter, Pool: r.Pool}
	if r.Label != "" {
		k, v, err := queue.ParseLabelFilter(r.Label)
		if err != nil {
			return queue.Page{}, clientErr("400", "label: %s", err)
		}
		p.LabelKey, p.LabelValue = k, v
	}
	return p, nil
}

// count counts the jobs of project r's filters select, by state.
func (s *ClientService) count(ctx context.Context, project string, r queue.ClientRequest) (*queue.JobCounts, error) {
	p, err := filter(project, r)
	if err != nil {
		return nil, err
	}
	c, err := s.Store.CountJobs(ctx, p)
	return &c, err
}

func (s *ClientService) list(ctx context.Context, project string, r queue.ClientRequest) (*queue.ClientJobList, error) {
	if r.Limit == 0 {
		r.Limit = 50
	}
	if r.Limit > queue.MaxClientList {
		return nil, clientErr("400", "limit: must be 1–%d, got %d", queue.MaxClientList, r.Limit)
	}
	p, err := filter(project, r)
	if err != nil {
		return nil, err
	}
	p.Limit = r.Limit + 1
	if r.Cursor != "" {
		at, id, err := queue.ParseListCursor(r.Cursor)
		if err != nil {
			return nil, clientErr("400", "cursor: not a cursor this service returned")
		}
		p.AfterAt, p.AfterID = at, id
	}
	jobs, err := s.Store.ListPage(ctx, p)
	if err != nil {
		return nil, err
	}
	list := &queue.ClientJobList{Jobs: jobs}
	if len(jobs) > r.Limit {
		list.Jobs = jobs[:r.Limit]
		last := list.Jobs[len(list.Jobs)-1]
		list.NextCursor = queue.ListCursor(last.SubmittedAt, last.ID)
	}
	if list.Jobs == nil {
		list.Jobs = []*queue.Job{}
	}
	return list, nil
}

func (s *ClientService) logs(ctx context.Context, job *queue.Job, r queue.ClientRequest) (*queue.ClientLogPage, error) {
	limit := r.Limit
	if limit == 0 || limit > queue.MaxClientLogChunks {
		limit = queue.MaxClientLogChunks
	}
	maxBytes := queue.MaxClientLogBytes
	if mp := int(s.NATS.MaxPayload()) / 8; mp > 0 && mp < maxBytes {
		maxBytes = mp
	}
	from := LogStart{After: r.After}
	if r.Tail > 0 && r.After == 0 {
		var err error
		if from, err = LogTail(ctx, s.JS, job.ID, r.Tail, r.Attempt); err != nil {
			return nil, err
		}
	}
	return ReadLogPage(ctx, s.JS, job, from, limit, maxBytes)
}

// result returns a succeeded job's output record, nil when it wrote none.
func (s *ClientService) result(ctx context.Context, job *queue.Job) (*queue.ArchiveRecord, error) {
	if job.State != queue.StateSucceeded {
		return nil, clientErr("409", "job %s has no results: it is %s, not succeeded", job.ID, job.State)
	}
	rec, err := s.Store.Result(ctx, job.ID)
	if errors.Is(err, queue.ErrNotFound) {
		return nil, nil
	}
	return rec, err
}

// archive answers a range of a succeeded job's output archive.
func (s *ClientService) archive(ctx context.Context, job *queue.Job, r queue.ClientRequest) ([]byte, error) {
	rec, err := s.result(ctx, job)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, clientErr("404", "job %s wrote no outputs", job.ID)
	}
	if r.Offset > rec.Bytes {
		return nil, clientErr("400", "offset: %d is past the archive's %d bytes", r.Offset, rec.Bytes)
	}
	limit := r.Limit
	if limit == 0 || limit > queue.MaxClientArchiveChunk {
		limit = queue.MaxClientArchiveChunk
	}
	w := &rangeWriter{skip: r.Offset, buf: make([]byte, 0, min(int64(limit), rec.Bytes-r.Offset))}
	err = s.Archives.Get(ctx, rec.StoreURI, w)
	if errors.Is(err, queue.ErrArchiveLost) {
		return nil, clientErr("410", "the job's outputs are recorded, but %v", err)
	}
	if err != nil && !errors.Is(err, errRangeFull) {
		return nil, err
	}
	return w.buf, nil
}

// errRangeFull stops a download once the range wanted is read.
var errRangeFull = errors.New("range read")

// rangeWriter keeps the bytes written to it from skip on, up to its
// buffer's capacity.
type rangeWriter struct {
	skip int64
	buf  []byte
}

func (w *rangeWriter) Write(p []byte) (int, error) {
	n := len(p)
	if w.skip >= int64(len(p)) {
		w.skip -= int64(len(p))
		return n, nil
	}
	p = p[w.skip:]
	w.skip = 0
	room := cap(w.buf) - len(w.buf)
	if len(p) >= room {
		w.buf = append(w.buf, p[:room]...)
		return n, errRangeFull
	}
	w.buf = append(w.buf, p...)
	return n, nil
}

// wait answers the events of the job's audit trail after the first r.Seen,
// waiting up to r.Wait for one. The job's event stream wakes it; when the
// stream is quiet for s.Quiet it reads the audit trail again, so that a
// lost event cannot hold a waiter.
func (s *ClientService) wait(ctx context.Context, job *queue.Job, r queue.ClientRequest) (*queue.ClientWait, error) {
	wctx, cancel := context.WithTimeout(ctx, r.Wait)
	defer cancel()
	news := make(chan struct{}, 1)
	if r.Wait > 0 {
		go queue.FollowEvents(wctx, s.JS, job.ID, func(queue.Event) bool { //nolint:errcheck // the audit trail read below decides
			select {
			case news <- struct{}{}:
			default:
			}
			return true
		})
	}
	for {
		// The job first, then its trail: a state change commits with its
		// event, so the trail read after holds every event up to the state
		// read (read the other way round, a change committed in between
		// would answer a finished job without its last event).
		var err error
		if job, err = s.Store.Job(ctx, job.ID); err != nil {
			return nil, err
		}
		history, err := s.Store.EventsOf(ctx, job.ID)
		if err != nil {
			return nil, err
		}
		out := &queue.ClientWait{Job: job, Events: []queue.Event{}, Seen: len(history)}
		if r.Seen < len(history) {
			out.Events = history[r.Seen:]
			if len(out.Events) > queue.MaxClientEvents {
				out.Events = out.Events[:queue.MaxClientEvents]
				out.Seen = r.Seen + queue.MaxClientEvents
			}
		}
		if len(out.Events) > 0 || job.State.Terminal() || wctx.Err() != nil {
			return out, nil
		}
		select {
		case <-news:
		case <-time.After(s.Quiet):
		case <-wctx.Done():
		}
	}
}

// ReadLogPage reads the job's stored output from from (after the log
// stream sequence from.After, the first chunk cut where the tail it begins
// with starts): at most limit chunks and about maxBytes of output. Done says the
// job had finished before the read and the page reaches the end of its
// output.
func ReadLogPage(ctx context.Context, js LogStreams, job *queue.Job, from LogStart, limit, maxBytes int) (*queue.ClientLogPage, error) {
	after := from.After
	subject := queue.JobLogsSubject(job.ID.String())
	last, err := lastSeq(ctx, js, queue.StreamLogs, subject)
	if err != nil {
		return nil, fmt.Errorf("reading logs of job %s: %w", job.ID, err)
	}
	page := &queue.ClientLogPage{Chunks: []queue.ClientLogChunk{}, NextAfter: after}
	if last > after {
		c, err := js.OrderedConsumer(ctx, queue.StreamLogs, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: after + 1})
		if err != nil {
			return nil, fmt.Errorf("reading logs of job %s: %w", job.ID, err)
		}
		size := 0
	read:
		for page.NextAfter < last && len(page.Chunks) < limit && size < maxBytes {
			batch, err := c.Fetch(min(limit-len(page.Chunks), 100), jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				return nil, fmt.Errorf("reading logs of job %s: %w", job.ID, err)
			}
			n := 0
			for msg := range batch.Messages() {
				n++
				meta, err := msg.Metadata()
				if err != nil {
					return nil, err
				}
				if size > 0 && size+len(msg.Data()) > maxBytes {
					break read
				}
				ch := logChunkOf(msg, meta.Sequence.Stream)
				ch.Data = from.Trim(ch.Seq, ch.Data)
				page.Chunks = append(page.Chunks, ch)
				page.NextAfter = meta.Sequence.Stream
				size += len(msg.Data())
				// Once the last chunk is read, the fetch need not wait
				// for more.
				if page.NextAfter >= last || meta.NumPending == 0 {
					break read
				}
			}
			if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
				return nil, fmt.Errorf("reading logs of job %s: %w", job.ID, err)
			}
			if n == 0 {
				break
			}
		}
	}
	page.More = page.NextAfter < last
	page.Done = job.State.Terminal() && !page.More
	return page, nil
}

func logChunkOf(msg jetstream.Msg, seq uint64) queue.ClientLogChunk {
	attempt := 0
	fmt.Sscan(msg.Headers().Get(queue.HeaderAttempt), &attempt) //nolint:errcheck // 0 when missing
	return queue.ClientLogChunk{Seq: seq, Attempt: attempt, Stream: msg.Headers().Get(queue.HeaderStream), Data: string(msg.Data())}
}

// lastSeq is the stream sequence of subject's last message, 0 when it has
// none.
func lastSeq(ctx context.Context, js LogStreams, stream, subject string) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	msg, err := st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return msg.Sequence, nil
}
