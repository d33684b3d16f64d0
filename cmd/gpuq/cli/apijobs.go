package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/workers"
)

// apiJobs serves the job commands through the HTTP API, so that a laptop
// needs only the API's URL and a token.
type apiJobs struct {
	base  *url.URL
	token string
	http  *http.Client
	// stderr, when set, is told of each stream that dropped and is being
	// reopened.
	stderr io.Writer
}

func newAPIJobs(v *viper.Viper) (*apiJobs, error) {
	raw := strings.TrimRight(v.GetString("url"), "/")
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("url: want the API's base URL such as http://127.0.0.1:8080, got %q", raw)
	}
	token := strings.TrimSpace(v.GetString("token"))
	if token == "" {
		return nil, errors.New("token: not set; set GPUQ_TOKEN or `token:` in the config file (`gpuq token create` makes one; `gpuq dev` writes its own to " + devConfigFile + ")")
	}
	// No overall timeout: streams last as long as the job; each call's
	// context bounds it.
	return &apiJobs{base: u, token: token, http: &http.Client{}, stderr: os.Stderr}, nil
}

func (a *apiJobs) Close() { a.http.CloseIdleConnections() }

// maxDocBytes bounds a JSON answer the client reads.
const maxDocBytes = 64 << 20

// APIError is an application/problem+json answer of the API (RFC 9457).
type APIError struct {
	Status int    `json:"status"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
	Errors []struct {
		Message  string `json:"message"`
		Location string `json:"location"`
	} `json:"errors"`
	// RetryAfter is when to ask again (its Retry-After header; 1 s when
	// it has none).
	RetryAfter time.Duration `json:"-"`
}

func (e *APIError) Error() string {
	msg := e.Detail
	if msg == "" {
		msg = e.Title
	}
	var fields []string
	for _, d := range e.Errors {
		if d.Location != "" && !strings.HasPrefix(msg, d.Location+":") {
			fields = append(fields, d.Location+": "+d.Message)
		} else if !strings.Contains(msg, d.Message) {
			fields = append(fields, d.Message)
		}
	}
	if len(fields) > 0 {
		msg += ": " + strings.Join(fields, "; ")
	}
	return fmt.Sprintf("%s (HTTP %d)", msg, e.Status)
}

// Is makes a 404 match queue.ErrNotFound.
func (e *APIError) Is(target error) bool {
	return target == queue.ErrNotFound && e.Status == http.StatusNotFound
}

// do sends a request, with the header name and value pairs of header, and
// returns the response when its status is 2xx, else the problem it carries.
//
// A 429 is sent again after the Retry-After it carries: the rate limiter
// refuses a request before anything acts on it, so that a sweep of
// submissions or cancellations slows down to the token's rate instead of
// failing halfway. A GET, or a submission with an idempotency key, answered
// 502, 503 or 504 (a server restarting, a proxy without its backend) is sent
// again for up to unavailableRetry, with one line on stderr; other requests
// are not, since the server may have acted on them.
func (a *apiJobs) do(ctx context.Context, method, path string, query url.Values, body io.Reader, contentType string, accept string, header ...string) (*http.Response, error) {
	u := *a.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Accept", accept)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	var limited time.Duration // waited for the rate limit so far
	var unavailable time.Time // when the server was first found unavailable
	backoff := queue.NewBackoff(streamRetryFirst, streamRetryMax)
	var refused error // the problem that made the request be sent again
	for {
		resp, err := a.send(req, method, path)
		var p *APIError
		if err != nil && refused != nil && ctx.Err() != nil && !errors.As(err, &p) {
			// The caller's context ended while the request was sent
			// again: what the server last said is the better answer.
			return nil, refused
		}
		if err == nil || !errors.As(err, &p) || (body != nil && req.GetBody == nil) {
			return resp, err
		}
		refused = err
		var pause time.Duration
		switch {
		case p.Status == http.StatusTooManyRequests && limited < rateLimitRetry:
			pause = min(p.RetryAfter, rateLimitRetry-limited)
			limited += pause
		case (method == http.MethodGet || ctx.Value(idempotent{}) != nil) && unavailableStatus(p.Status):
			if unavailable.IsZero() {
				unavailable = time.Now()
				if a.stderr != nil && ctx.Value(toldOutage{}) == nil {
					fmt.Fprintf(a.stderr, "gpuq: %s %s: %v; trying again for up to %s\n", method, path, p, unavailableRetry)
				}
			}
			pause = backoff.NextBackOff()
			if time.Since(unavailable)+pause > unavailableRetry {
				return nil, err
			}
		default:
			return nil, err
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, err
		}
		next := req.Clone(ctx)
		if req.GetBody != nil {
			if next.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
		req = next
	}
}

// toldOutage marks the context of a request whose caller has already said
// on stderr that the server is out of reach (a stream being reopened), so
// that do does not say it again.
type toldOutage struct{}

// idempotent marks the context of a request that may be sent again
// whatever the server did with it: a submission with an idempotency key,
// which names the same job however often it arrives.
type idempotent struct{}

// rateLimitRetry bounds the time one request waits for its token's rate
// limit; unavailableRetry the time a GET is tried again while the server
// answers 502, 503 or 504.
const (
	rateLimitRetry   = 2 * time.Minute
	unavailableRetry = 30 * time.Second
)

// unavailableStatus is a server briefly unavailable: restarting, or a
// proxy in front of it without its backend.
func unavailableStatus(status int) bool {
	switch status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// send sends req once.
func (a *apiJobs) send(req *http.Request, method, path string) (*http.Response, error) {
	resp, err := a.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && req.Context().Err() == nil && !ue.Timeout() {
			hint := ""
			if errors.Is(err, syscall.ECONNREFUSED) {
				hint = " (is gpuq dev or gpuq server running there?)"
			}
			return nil, fmt.Errorf("%s %s: cannot reach the gpuq HTTP API at %s: %w%s", method, path, a.base.Redacted(), ue.Err, hint)
		}
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	p := &APIError{Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	if json.Unmarshal(data, p) != nil || p.Title == "" && p.Detail == "" {
		p.Detail = strings.TrimSpace(string(data))
		if p.Detail == "" {
			p.Detail = http.StatusText(resp.StatusCode)
		}
	}
	p.Status = resp.StatusCode
	return nil, p
}

// retryAfter reads a Retry-After header, seconds or an HTTP date, as a wait
// of 1 s to 1 min (1 s when there is none or it cannot be read).
func retryAfter(v string) time.Duration {
	d := time.Second
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = time.Until(t)
	}
	return min(max(d, time.Second), time.Minute)
}

// call sends a request (with the header name and value pairs of header)
// and decodes its JSON answer into out.
func (a *apiJobs) call(ctx context.Context, method, path string, query url.Values, body io.Reader, contentType string, out any, header ...string) error {
	resp, err := a.do(ctx, method, path, query, body, contentType, "application/json", header...)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxDocBytes)).Decode(out); err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	return nil
}

func jobPath(id uuid.UUID, rest string) string { return "/v1/jobs/" + id.String() + rest }

func (a *apiJobs) Submit(ctx context.Context, spec *queue.Spec) (*queue.Job, error) {
	body, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if spec.IdempotencyKey != "" {
		ctx = context.WithValue(ctx, idempotent{}, true)
	}
	var job queue.Job
	return &job, a.call(ctx, http.MethodPost, "/v1/jobs", nil, bytes.NewReader(body), "application/json", &job)
}

func (a *apiJobs) Job(ctx context.Context, id uuid.UUID) (*queue.Job, error) {
	var job queue.Job
	return &job, a.call(ctx, http.MethodGet, jobPath(id, ""), nil, nil, "", &job)
}

func (a *apiJobs) Explain(ctx context.Context, id uuid.UUID) (*policy.Decision, error) {
	var view struct {
		Decision policy.Decision `json:"decision"`
	}
	if err := a.call(ctx, http.MethodGet, jobPath(id, "/placement"), url.Values{"explain": {"true"}}, nil, "", &view); err != nil {
		return nil, err
	}
	return &view.Decision, nil
}

func (a *apiJobs) Status(ctx context.Context, id uuid.UUID) (*control.JobStatus, error) {
	var st control.JobStatus
	return &st, a.call(ctx, http.MethodGet, jobPath(id, "/status"), nil, nil, "", &st)
}

// List follows the API's pages until it has f.Limit jobs or there are no
// more.
func (a *apiJobs) List(ctx context.Context, f listFilter) (*JobPage, error) {
	q := f.query()
	out := &JobPage{Jobs: []*queue.Job{}}
	for len(out.Jobs) < f.Limit {
		q.Set("limit", strconv.Itoa(min(maxListPage, f.Limit-len(out.Jobs))))
		var page JobPage
		if err := a.call(ctx, http.MethodGet, "/v1/jobs", q, nil, "", &page); err != nil {
			return nil, err
		}
		out.Jobs = append(out.Jobs, page.Jobs...)
		if page.NextCursor == "" || len(page.Jobs) == 0 {
			break
		}
		q.Set("cursor", page.NextCursor)
	}
	return out, nil
}

func (a *apiJobs) Count(ctx context.Context, f listFilter) (*queue.JobCounts, error) {
	var c queue.JobCounts
	return &c, a.call(ctx, http.MethodGet, "/v1/jobs/counts", f.query(), nil, "", &c)
}

// query is the filter as the API's listing and count take it.
func (f listFilter) query() url.Values {
	q := url.Values{}
	if f.Project != "" {
		q.Set("project", f.Project)
	}
	if f.State != "" {
		q.Set("state", string(f.State))
	}
	if f.Label != "" {
		q.Set("label", f.Label)
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if f.RunsAfter != uuid.Nil {
		q.Set("runs_after", f.RunsAfter.String())
	}
	if f.Pool != "" {
		q.Set("pool", f.Pool)
	}
	return q
}

func (a *apiJobs) Cancel(ctx context.Context, id uuid.UUID) (*queue.Job, error) {
	var job queue.Job
	return &job, a.call(ctx, http.MethodPost, jobPath(id, "/cancel"), nil, nil, "", &job)
}

func (a *apiJobs) Retry(ctx context.Context, id uuid.UUID, fresh bool) (*queue.Job, error) {
	var q url.Values
	if fresh {
		q = url.Values{"fresh": {"true"}}
	}
	var job queue.Job
	return &job, a.call(ctx, http.MethodPost, jobPath(id, "/retry"), q, nil, "", &job)
}

func (a *apiJobs) Nodes(ctx context.Context, pool string) ([]*queue.Node, error) {
	var nodes []*queue.Node
	return nodes, a.call(ctx, http.MethodGet, "/v1/nodes", poolQuery(pool), nil, "", &nodes)
}

func (a *apiJobs) Workers(ctx context.Context, pool string) ([]queue.LiveWorker, error) {
	var workers []queue.LiveWorker
	return workers, a.call(ctx, http.MethodGet, "/v1/workers", poolQuery(pool), nil, "", &workers)
}

// poolQuery asks for one pool's entries, or every pool's when pool is empty.
func poolQuery(pool string) url.Values {
	q := url.Values{}
	if pool != "" {
		q.Set("pool", pool)
	}
	return q
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	ID, Event string
	Data      []byte
}

// maxSSELine bounds one line of an event stream (a log chunk is at most
// 32 KiB before JSON escaping).
const maxSSELine = 4 << 20

// stream reads the Server-Sent Events of path, calling fn with each until
// fn returns false or ctx ends.
//
// A stream that opened is reopened where it left off (Last-Event-ID) when
// its connection drops or the server is briefly unavailable (a restart, a
// proxy's 502, 503 or 504), until fn says stop or ctx ends: a job followed
// for hours outlives a server restart. What the server refuses (a job not
// found, a token revoked) ends it; so does a failure to open it the first
// time, so that a wrong URL is reported at once (do first asks a server
// that answers 502, 503 or 504 again for a while).
func (a *apiJobs) stream(ctx context.Context, path string, query url.Values, fn func(sseEvent) (bool, error)) error {
	return a.streamAfter(ctx, path, query, "", fn)
}

// streamAfter is stream starting after the event with id last ("": as the
// server starts a stream without Last-Event-ID).
func (a *apiJobs) streamAfter(ctx context.Context, path string, query url.Values, last string, fn func(sseEvent) (bool, error)) error {
	// opened: the stream opened once; dropped: it has dropped since its
	// last event, and stderr was told. A stream that opens and drops
	// again without an event waits longer each time.
	opened, dropped, stopped := false, false, false
	retry := queue.NewBackoff(streamRetryFirst, streamRetryMax)
	track := func(e sseEvent) (bool, error) {
		retry.Reset()
		dropped = false
		if e.ID != "" {
			last = e.ID
		}
		more, err := fn(e)
		stopped = err != nil || !more
		return more, err
	}
	for {
		var header []string
		if last != "" {
			header = []string{"Last-Event-ID", last}
		}
		reqCtx := ctx
		if dropped {
			reqCtx = context.WithValue(ctx, toldOutage{}, true)
		}
		resp, err := a.do(reqCtx, http.MethodGet, path, query, nil, "", "text/event-stream", header...)
		if err == nil {
			opened = true
			err = readSSE(ctx, resp, path, track)
			if stopped || ctx.Err() != nil {
				return err
			}
		}
		if !opened || !reopenable(err) {
			return err
		}
		if a.stderr != nil && !dropped {
			cause := "the server ended it"
			if err != nil {
				cause = err.Error()
			}
			fmt.Fprintf(a.stderr, "gpuq: the stream of %s dropped (%s); reopening it\n", path, cause)
		}
		dropped = true
		select {
		case <-time.After(retry.NextBackOff()):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// streamRetryFirst and streamRetryMax bound the wait before reopening a
// dropped stream.
const (
	streamRetryFirst = 250 * time.Millisecond
	streamRetryMax   = 5 * time.Second
)

// reopenable tells a dropped connection or a server briefly unavailable
// from an answer that ends a stream for good. A nil err is a stream the
// server ended cleanly before fn said stop.
func reopenable(err error) bool {
	if errors.Is(err, bufio.ErrTooLong) {
		return false // the same line would stop it again
	}
	var api *APIError
	if errors.As(err, &api) {
		return unavailableStatus(api.Status)
	}
	return true
}

// readSSE hands each event of resp's body to fn until fn says stop or the
// body ends, and closes it.
func readSSE(ctx context.Context, resp *http.Response, path string, fn func(sseEvent) (bool, error)) error {
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxSSELine)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if ev.Event != "" || ev.Data != nil {
				more, err := fn(ev)
				if err != nil || !more {
					return err
				}
			}
			ev = sseEvent{}
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			ev.ID = value
		case "event":
			ev.Event = value
		case "data":
			if ev.Data != nil {
				ev.Data = append(ev.Data, '\n')
			}
			ev.Data = append(ev.Data, value...)
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	return ctx.Err()
}

func (a *apiJobs) Events(ctx context.Context, id uuid.UUID, fn func(queue.Event) bool) error {
	return a.stream(ctx, jobPath(id, "/events"), nil, func(e sseEvent) (bool, error) {
		if e.Event != "state" {
			return true, nil
		}
		var ev queue.Event
		if err := json.Unmarshal(e.Data, &ev); err != nil {
			return false, fmt.Errorf("job %s events: %w", id, err)
		}
		return fn(ev) && !ev.Ends(), nil
	})
}

func chunkOf(c httpapi.LogChunk) queue.LogChunk {
	return queue.LogChunk{Attempt: c.Attempt, Stream: c.Stream, Data: []byte(c.Data)}
}

func (a *apiJobs) Logs(ctx context.Context, id uuid.UUID, r logRead, fn func(queue.LogChunk) error) error {
	tail := url.Values{}
	if r.Tail > 0 {
		tail.Set("tail", strconv.Itoa(r.Tail))
		if r.Attempt > 0 {
			tail.Set("attempt", strconv.Itoa(r.Attempt))
		}
	}
	if r.Follow {
		// A stream reopened after a drop goes on from its last chunk
		// (Last-Event-ID), which the server prefers to the tail.
		q := url.Values{"follow": {"true"}}
		maps.Copy(q, tail)
		return a.stream(ctx, jobPath(id, "/logs"), q, func(e sseEvent) (bool, error) {
			switch e.Event {
			case "end":
				return false, nil
			case "log":
				var c httpapi.LogChunk
				if err := json.Unmarshal(e.Data, &c); err != nil {
					return false, fmt.Errorf("job %s logs: %w", id, err)
				}
				return true, fn(chunkOf(c))
			}
			return true, nil
		})
	}
	var after uint64
	for {
		var page httpapi.LogPage
		q := url.Values{"after": {strconv.FormatUint(after, 10)}, "limit": {"1000"}}
		if after == 0 {
			maps.Copy(q, tail)
		}
		if err := a.call(ctx, http.MethodGet, jobPath(id, "/logs"), q, nil, "", &page); err != nil {
			return err
		}
		for _, c := range page.Chunks {
			if err := fn(chunkOf(c)); err != nil {
				return err
			}
		}
		if len(page.Chunks) == 0 || page.NextAfter <= after {
			return nil
		}
		after = page.NextAfter
	}
}

func (a *apiJobs) Results(ctx context.Context, id uuid.UUID, dir string, lim queue.ArchiveLimits, shown *transfer) (*Results, error) {
	var res Results
	if err := a.call(ctx, http.MethodGet, jobPath(id, "/results"), nil, nil, "", &res); err != nil {
		return nil, err
	}
	if res.Files == nil {
		res.Files = []ResultFile{}
	}
	if len(res.Files) == 0 {
		return &res, nil
	}
	resp, err := a.do(ctx, http.MethodGet, jobPath(id, "/results/archive"), nil, nil, "", "application/zstd")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	f, err := os.CreateTemp("", "gpuq-results-*.tar.zst")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h, shown.writer(res.Bytes)), resp.Body)
	shown.close()
	if err != nil {
		return nil, fmt.Errorf("downloading the outputs of job %s: %w", id, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != res.SHA256 {
		return nil, fmt.Errorf("outputs of job %s: downloaded sha256 %s, recorded %s", id, got, res.SHA256)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &res, workers.Unpack(f, dir, lim)
}

// retryNotFound repeats get while it answers not found, for up to wait: a
// job the API accepted (202) is recorded by the scheduler moments later.
func retryNotFound(ctx context.Context, wait time.Duration, get func() error) error {
	deadline := time.Now().Add(wait)
	for {
		err := get()
		if !errors.Is(err, queue.ErrNotFound) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
