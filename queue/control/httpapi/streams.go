package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

// maxLogPageBytes bounds the output one range answer carries; a range
// stops at the chunk that crosses it.
const maxLogPageBytes = 4 << 20

// keepAlive is how often an idle event stream sends a comment, so that
// proxies and clients see the connection alive.
const keepAlive = 15 * time.Second

// LogChunk is a piece of a job's output: one JetStream message of the log
// stream, Seq its stream sequence.
type LogChunk struct {
	Seq     uint64 `json:"seq"`
	Attempt int    `json:"attempt"`
	Stream  string `json:"stream" enum:"stdout,stderr"`
	Data    string `json:"data"`
}

// LogPage is a range of a job's output.
type LogPage struct {
	Chunks []LogChunk `json:"chunks"`
	// NextAfter is the after= of the next range; it equals the request's
	// when there is nothing more yet.
	NextAfter uint64 `json:"next_after"`
}

// LogEnd closes a followed log: the job finished and all its output was sent.
type LogEnd struct {
	State queue.JobState `json:"state"`
}

// ProjectEvent is a job event in a project's event stream.
type ProjectEvent struct {
	Project string `json:"project"`
	queue.Event
}

type eventsInput struct {
	ID          uuid.UUID `path:"id" doc:"job id"`
	LastEventID string    `header:"Last-Event-ID" maxLength:"20" doc:"resume after this event (the stream sequence of the last event received)"`
}

type projectEventsInput struct {
	Project     string `path:"project" maxLength:"63" pattern:"^[a-z0-9][a-z0-9_-]{0,62}$" patternDescription:"a project name: 1–63 lower-case letters, digits, - or _, starting with a letter or digit"`
	LastEventID string `header:"Last-Event-ID" maxLength:"20" doc:"resume after this event; without it only new events are sent"`
}

type logsInput struct {
	ID          uuid.UUID `path:"id" doc:"job id"`
	After       uint64    `query:"after" doc:"only chunks after this sequence number"`
	Limit       int       `query:"limit" minimum:"1" maximum:"1000" default:"200" doc:"at most this many chunks (without follow)"`
	Follow      bool      `query:"follow" doc:"stream the output as Server-Sent Events until the job finishes"`
	LastEventID string    `header:"Last-Event-ID" maxLength:"20" doc:"with follow: resume after this chunk"`
	Tail        int       `query:"tail" minimum:"0" maximum:"10000" doc:"without after and Last-Event-ID: begin with the job's last this many lines of output (the first chunk cut where they begin); 0 begins with the first"`
	Attempt     int       `query:"attempt" minimum:"0" doc:"with tail: count only this attempt's lines (the chunks that follow are every attempt's); 0 counts every attempt's"`
}

// sseContent documents a text/event-stream response whose events carry the
// given types, as huma's sse package does.
func sseContent(api huma.API, events map[string]any) *huma.MediaType {
	var schemas []*huma.Schema
	for _, name := range sortedKeys(events) {
		schemas = append(schemas, &huma.Schema{
			Title: "Event " + name, Type: huma.TypeObject, Required: []string{"id", "event", "data"},
			Properties: map[string]*huma.Schema{
				"id":    {Type: huma.TypeInteger, Description: "the stream sequence; send it back as Last-Event-ID to resume"},
				"event": {Type: huma.TypeString, Extensions: map[string]any{"const": name}},
				"data":  api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(events[name]), true, name),
			},
		})
	}
	return &huma.MediaType{Schema: &huma.Schema{
		Title: "Server-Sent Events", Type: huma.TypeArray,
		Description: "Each item is one Server-Sent Event, written as `id:`, `event:` and `data:` (JSON) lines.",
		Items:       &huma.Schema{OneOf: schemas},
	}}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if keys[j] < keys[i] {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
	}
	return keys
}

func (s *Server) registerStreams(api huma.API) {
	logSchema := api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[LogPage](), true, "")
	register(api, huma.Operation{
		OperationID: "get-job-events", Errors: []int{404, 422}, Method: http.MethodGet, Path: "/v1/jobs/{id}/events", Tags: []string{"events"},
		Summary:     "Follow a job's state changes (Server-Sent Events)",
		Description: "Sends every recorded state change of the job, oldest first, then each new one as it happens; the stream ends after the terminal state. Reconnect with Last-Event-ID to resume.",
		Responses:   map[string]*huma.Response{"200": {Description: "event stream", Content: map[string]*huma.MediaType{"text/event-stream": sseContent(api, map[string]any{"state": queue.Event{}})}}},
		Metadata:    map[string]any{metaRole: queue.RoleRead},
	}, s.jobEvents)
	register(api, huma.Operation{
		OperationID: "get-project-events", Errors: []int{404, 422}, Method: http.MethodGet, Path: "/v1/projects/{project}/events", Tags: []string{"events"},
		Summary:     "Follow the state changes of a project's jobs (Server-Sent Events)",
		Description: "Sends each state change of the project's jobs as it happens. With Last-Event-ID, first the events after that one that are still retained.",
		Responses:   map[string]*huma.Response{"200": {Description: "event stream", Content: map[string]*huma.MediaType{"text/event-stream": sseContent(api, map[string]any{"state": ProjectEvent{}})}}},
		Metadata:    map[string]any{metaRole: queue.RoleRead},
	}, s.projectEvents)
	register(api, huma.Operation{
		OperationID: "get-job-logs", Errors: []int{404, 422}, Method: http.MethodGet, Path: "/v1/jobs/{id}/logs", Tags: []string{"jobs"},
		Summary:     "Read a job's output: a range, or followed live (follow=true, Server-Sent Events)",
		Description: "Without follow: the chunks after `after`, at most `limit`, as JSON. With follow: every chunk after `after` (or Last-Event-ID) as a `log` event, new ones as they are written, and an `end` event once the job has finished and all its output was sent. With `tail` (and no `after` or Last-Event-ID), either begins with the job's last `tail` lines of output: a job's output of hours, followed from where it is now.",
		Responses: map[string]*huma.Response{"200": {Description: "output", Content: map[string]*huma.MediaType{
			"application/json":  {Schema: logSchema},
			"text/event-stream": sseContent(api, map[string]any{"log": LogChunk{}, "end": LogEnd{}}),
		}}},
		Metadata: map[string]any{metaRole: queue.RoleRead},
	}, s.logs)
}

// resumeAfter parses Last-Event-ID.
func resumeAfter(h string) (uint64, error) {
	if h == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(h, 10, 64)
	if err != nil {
		return 0, fieldProblem("header.Last-Event-ID", "want the id of an event this API sent, got %q", h)
	}
	return n, nil
}

// eventWriter writes Server-Sent Events, one at a time.
type eventWriter struct {
	mu sync.Mutex
	w  io.Writer
	f  http.Flusher
}

func newEventWriter(ctx huma.Context) *eventWriter {
	ctx.SetHeader("Content-Type", "text/event-stream")
	ctx.SetHeader("Cache-Control", "no-cache")
	ctx.SetHeader("X-Accel-Buffering", "no")
	ctx.SetStatus(http.StatusOK)
	w := ctx.BodyWriter()
	f, _ := w.(http.Flusher)
	ew := &eventWriter{w: w, f: f}
	ew.flush()
	return ew
}

func (e *eventWriter) flush() {
	if e.f != nil {
		e.f.Flush()
	}
}

func (e *eventWriter) send(id uint64, event string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := fmt.Fprintf(e.w, "id: %d\nevent: %s\ndata: %s\n\n", id, event, b); err != nil {
		return err
	}
	e.flush()
	return nil
}

func (e *eventWriter) comment(text string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := fmt.Fprintf(e.w, ": %s\n\n", text); err != nil {
		return err
	}
	e.flush()
	return nil
}

// consumerFrom is an ordered consumer of subject starting after seq (at the
// stream's start when seq is 0), or with only new messages when newOnly:
// those published after this call, whenever the first fetch comes.
func (s *Server) consumerFrom(ctx context.Context, stream, subject string, after uint64, newOnly bool) (jetstream.Consumer, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}}
	if newOnly && after == 0 {
		// An ordered consumer is created again at its first fetch, after
		// the response has begun; DeliverNew would start there and miss
		// what was published in between. Start after the stream's last
		// message as it is now instead.
		st, err := s.cfg.JS.Stream(ctx, stream)
		if err != nil {
			return nil, err
		}
		after = st.CachedInfo().State.LastSeq
	}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	return s.cfg.JS.OrderedConsumer(ctx, stream, cfg)
}

// follow calls fn with each message of c as it arrives, and tick when none
// came for a while, until fn or tick says stop, or ctx ends.
//
// Each pull waits up to wait, and ends with ctx: a server that stops ends
// its streams at once, not at their next keep-alive.
func follow(ctx context.Context, c jetstream.Consumer, wait time.Duration, fn func(jetstream.Msg) (bool, error), tick func() (bool, error)) error {
	for ctx.Err() == nil {
		n, err := followBatch(ctx, c, wait, fn)
		if err != nil || n < 0 {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if n == 0 {
			more, err := tick()
			if err != nil || !more {
				return err
			}
		}
	}
	return nil
}

// followBatch hands fn the messages of one pull of up to wait and returns
// how many there were, or -1 when fn said stop.
func followBatch(ctx context.Context, c jetstream.Consumer, wait time.Duration, fn func(jetstream.Msg) (bool, error)) (int, error) {
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	batch, err := c.Fetch(100, jetstream.FetchContext(pctx))
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil
		}
		return 0, err
	}
	n := 0
	for msg := range batch.Messages() {
		n++
		more, err := fn(msg)
		if err != nil || !more {
			return -1, err
		}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return n, err
	}
	return n, nil
}

func seqOf(msg jetstream.Msg) uint64 {
	meta, err := msg.Metadata()
	if err != nil {
		return 0
	}
	return meta.Sequence.Stream
}

func (s *Server) jobEvents(ctx context.Context, in *eventsInput) (*huma.StreamResponse, error) {
	job, err := s.ownJob(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	after, err := resumeAfter(in.LastEventID)
	if err != nil {
		return nil, err
	}
	subject := queue.EventSubject(job.ID.String())
	if job.State.Terminal() && after > 0 {
		// Resumed after the end: nothing more will come.
		last, err := s.lastSeq(ctx, queue.StreamEvents, subject)
		if err != nil {
			return nil, internal(s.cfg.Logger, "following events", err)
		}
		if last <= after {
			return &huma.StreamResponse{Body: func(hctx huma.Context) { newEventWriter(hctx) }}, nil
		}
	}
	c, err := s.consumerFrom(ctx, queue.StreamEvents, subject, after, false)
	if err != nil {
		return nil, internal(s.cfg.Logger, "following events", err)
	}
	return &huma.StreamResponse{Body: func(hctx huma.Context) {
		w := newEventWriter(hctx)
		err := follow(hctx.Context(), c, keepAlive, func(msg jetstream.Msg) (bool, error) {
			var ev queue.Event
			if err := json.Unmarshal(msg.Data(), &ev); err != nil {
				return true, nil
			}
			if ev.State.Terminal() {
				ev.Superseded = s.superseded(hctx.Context(), msg, job.ID)
			}
			if err := w.send(seqOf(msg), "state", ev); err != nil {
				return false, err
			}
			return !ev.Ends(), nil
		}, func() (bool, error) { return true, w.comment("keep-alive") })
		s.streamEnded("job events", err)
	}}, nil
}

// superseded reports whether the end msg announces was retried since: an
// event follows it in the stream, or the job is no longer finished (its
// retry's events are on their way).
func (s *Server) superseded(ctx context.Context, msg jetstream.Msg, id uuid.UUID) bool {
	if meta, err := msg.Metadata(); err == nil && meta.NumPending > 0 {
		return true
	}
	job, err := s.cfg.Store.Job(ctx, id)
	return err == nil && !job.State.Terminal()
}

func (s *Server) projectEvents(ctx context.Context, in *projectEventsInput) (*huma.StreamResponse, error) {
	tok := tokenOf(ctx)
	if !tok.Sees(in.Project) {
		return nil, huma.Error404NotFound("project " + in.Project + " not found")
	}
	after, err := resumeAfter(in.LastEventID)
	if err != nil {
		return nil, err
	}
	c, err := s.consumerFrom(ctx, queue.StreamEvents, queue.EventSubject("*"), after, after == 0)
	if err != nil {
		return nil, internal(s.cfg.Logger, "following events", err)
	}
	owners := &projectOf{store: s.cfg.Store, known: map[uuid.UUID]string{}}
	return &huma.StreamResponse{Body: func(hctx huma.Context) {
		w := newEventWriter(hctx)
		err := follow(hctx.Context(), c, keepAlive, func(msg jetstream.Msg) (bool, error) {
			var ev queue.Event
			if err := json.Unmarshal(msg.Data(), &ev); err != nil {
				return true, nil
			}
			project, err := owners.of(hctx.Context(), ev.JobID)
			if err != nil || project != in.Project {
				return true, nil
			}
			return true, w.send(seqOf(msg), "state", ProjectEvent{Project: project, Event: ev})
		}, func() (bool, error) { return true, w.comment("keep-alive") })
		s.streamEnded("project events", err)
	}}, nil
}

// projectOf remembers which project each job belongs to: the event stream's
// subjects name the job only, and a job never changes project.
type projectOf struct {
	store interface {
		Job(ctx context.Context, id uuid.UUID) (*queue.Job, error)
	}
	known map[uuid.UUID]string
}

// maxKnownJobs bounds what one project stream remembers.
const maxKnownJobs = 10000

func (p *projectOf) of(ctx context.Context, id uuid.UUID) (string, error) {
	if project, ok := p.known[id]; ok {
		return project, nil
	}
	job, err := p.store.Job(ctx, id)
	if err != nil {
		return "", err
	}
	if len(p.known) >= maxKnownJobs {
		clear(p.known)
	}
	p.known[id] = job.Project
	return job.Project, nil
}

func (s *Server) streamEnded(what string, err error) {
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
		s.cfg.Logger.Warn("event stream ended", "stream", what, "err", err)
	}
}

func chunkOf(msg jetstream.Msg) LogChunk {
	attempt, _ := strconv.Atoi(msg.Headers().Get(queue.HeaderAttempt))
	return LogChunk{Seq: seqOf(msg), Attempt: attempt, Stream: msg.Headers().Get(queue.HeaderStream), Data: string(msg.Data())}
}

func (s *Server) logs(ctx context.Context, in *logsInput) (*huma.StreamResponse, error) {
	job, err := s.ownJob(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	after := in.After
	if in.Follow && in.LastEventID != "" {
		if after, err = resumeAfter(in.LastEventID); err != nil {
			return nil, err
		}
	}
	from := control.LogStart{After: after}
	if in.Tail > 0 && after == 0 {
		if from, err = control.LogTail(ctx, s.cfg.JS, job.ID, in.Tail, in.Attempt); err != nil {
			return nil, internal(s.cfg.Logger, "reading logs", err)
		}
		after = from.After
	}
	subject := queue.JobLogsSubject(job.ID.String())
	last, err := s.lastSeq(ctx, queue.StreamLogs, subject)
	if err != nil {
		return nil, internal(s.cfg.Logger, "reading logs", err)
	}
	if !in.Follow {
		page := &LogPage{Chunks: []LogChunk{}, NextAfter: after}
		if last > after {
			c, err := s.consumerFrom(ctx, queue.StreamLogs, subject, after, false)
			if err != nil {
				return nil, internal(s.cfg.Logger, "reading logs", err)
			}
			size := 0
			err = follow(ctx, c, 2*time.Second, func(msg jetstream.Msg) (bool, error) {
				ch := chunkOf(msg)
				ch.Data = from.Trim(ch.Seq, ch.Data)
				page.Chunks = append(page.Chunks, ch)
				page.NextAfter = ch.Seq
				size += len(ch.Data)
				return len(page.Chunks) < in.Limit && size < maxLogPageBytes && ch.Seq < last, nil
			}, func() (bool, error) { return false, nil })
			if err != nil {
				return nil, internal(s.cfg.Logger, "reading logs", err)
			}
		}
		return &huma.StreamResponse{Body: func(hctx huma.Context) {
			hctx.SetHeader("Content-Type", "application/json")
			hctx.SetStatus(http.StatusOK)
			json.NewEncoder(hctx.BodyWriter()).Encode(page) //nolint:errcheck // the client went away
		}}, nil
	}
	c, err := s.consumerFrom(ctx, queue.StreamLogs, subject, after, false)
	if err != nil {
		return nil, internal(s.cfg.Logger, "reading logs", err)
	}
	return &huma.StreamResponse{Body: func(hctx huma.Context) {
		rctx, cancel := context.WithCancel(hctx.Context())
		defer cancel()
		// The job's end comes from its event stream, as its output does.
		var end atomic.Pointer[queue.JobState]
		go queue.FollowEvents(rctx, s.cfg.JS, in.ID, func(ev queue.Event) bool { //nolint:errcheck // ends with rctx
			if ev.State.Terminal() {
				end.Store(&ev.State)
				return false
			}
			return true
		})
		w := newEventWriter(hctx)
		lastSent, quiet := after, time.Now()
		err := follow(rctx, c, time.Second, func(msg jetstream.Msg) (bool, error) {
			ch := chunkOf(msg)
			ch.Data = from.Trim(ch.Seq, ch.Data)
			lastSent = ch.Seq
			return true, w.send(ch.Seq, "log", ch)
		}, func() (bool, error) {
			// No new output for a second: the log ends once the job has
			// finished and everything its workers wrote was sent.
			if state := end.Load(); state != nil {
				last, err := s.lastSeq(rctx, queue.StreamLogs, subject)
				if err != nil || last <= lastSent {
					return false, errors.Join(err, w.send(lastSent, "end", LogEnd{State: *state}))
				}
			}
			if time.Since(quiet) >= keepAlive {
				quiet = time.Now()
				return true, w.comment("keep-alive")
			}
			return true, nil
		})
		s.streamEnded("logs", err)
	}}, nil
}

// lastSeq is the stream sequence of subject's last message, 0 when it has
// none.
func (s *Server) lastSeq(ctx context.Context, stream, subject string) (uint64, error) {
	st, err := s.cfg.JS.Stream(ctx, stream)
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
