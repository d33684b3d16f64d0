package queue

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// The client service is how CLI commands and other NATS clients read and
// change jobs without a key to PostgreSQL: NATS request/reply on
// gpuq.svc.client.<project>.<op>, served by every control plane in the
// queue group gpuq-control. The project in the subject scopes the call (a
// submitter credential may publish only on its projects' subjects): a job
// of another project answers "not found".
const (
	// ClientServiceName is the nats micro service's name.
	ClientServiceName = "gpuq-client"
	// ClientServicePrefix starts every client service subject.
	ClientServicePrefix = "gpuq.svc.client"
	// ClientQueueGroup is the queue group every control plane serves the
	// client service in.
	ClientQueueGroup = "gpuq-control"
)

// Client service operations, the last token of the subject.
const (
	ClientOpJob         = "job"
	ClientOpStatus      = "status"
	ClientOpExplain     = "explain"
	ClientOpList        = "list"
	ClientOpCount       = "count"
	ClientOpLogs        = "logs"
	ClientOpResults     = "results"
	ClientOpArchive     = "archive"
	ClientOpCancel      = "cancel"
	ClientOpRetry       = "retry"
	ClientOpWait        = "wait"
	ClientOpNodes       = "nodes"
	ClientOpWorkers     = "workers"
	ClientOpCheckpoints = "checkpoints"
)

// ClientOps are the operations the client service serves.
var ClientOps = []string{ClientOpJob, ClientOpStatus, ClientOpExplain, ClientOpList, ClientOpCount, ClientOpLogs, ClientOpResults,
	ClientOpArchive, ClientOpCancel, ClientOpRetry, ClientOpWait, ClientOpNodes, ClientOpWorkers, ClientOpCheckpoints}

// ClientServiceSubject is the subject of op for a caller of project.
func ClientServiceSubject(project, op string) string {
	return ClientServicePrefix + "." + project + "." + op
}

// ClientSubjectParts splits a client service subject into its project and
// op.
func ClientSubjectParts(subject string) (project, op string, ok bool) {
	rest, ok := strings.CutPrefix(subject, ClientServicePrefix+".")
	if !ok {
		return "", "", false
	}
	project, op, ok = strings.Cut(rest, ".")
	if !ok || strings.Contains(op, ".") || !projectRe.MatchString(project) {
		return "", "", false
	}
	return project, op, true
}

// Bounds of the client service's requests and replies.
const (
	// MaxClientRequest bounds a request's body.
	MaxClientRequest = 16 << 10
	// MaxClientWait bounds how long one wait or job request is held open.
	MaxClientWait = 25 * time.Second
	// MaxClientList bounds the jobs one list answer carries.
	MaxClientList = 500
	// MaxClientLogChunks bounds the log chunks one logs answer carries.
	MaxClientLogChunks = 1000
	// MaxClientLogBytes bounds the output one logs answer carries: JSON
	// escaping can multiply it, and the answer must fit a NATS message
	// (1 MiB by default).
	MaxClientLogBytes = 128 << 10
	// MaxClientArchiveChunk bounds the archive bytes one archive answer
	// carries.
	MaxClientArchiveChunk = 256 << 10
	// MaxClientEvents bounds the events one wait answer carries.
	MaxClientEvents = 100
	// MaxLogTail bounds the lines of output a logs read may begin with
	// (tail), over NATS and HTTP.
	MaxLogTail = 10000
)

// ClientRequest is the body of every client service request; each
// operation reads the fields it needs.
type ClientRequest struct {
	// Every operation but list, count, nodes and workers.
	JobID uuid.UUID `json:"job_id,omitzero"`
	// list, count: only jobs in this state; list: at most Limit of them
	// (default 50).
	State JobState `json:"state,omitempty"`
	// list, count: only jobs whose spec.labels has this entry (key=value),
	// and only jobs submitted at or after Since.
	Label string    `json:"label,omitempty"`
	Since time.Time `json:"since,omitzero"`
	// list, count: only jobs that run after this one (their spec.after or
	// spec.after_ended names it).
	RunsAfter uuid.UUID `json:"runs_after,omitzero"`
	// list: continue after the page whose NextCursor this is.
	Cursor string `json:"cursor,omitempty"`
	// list, logs: at most this many jobs or chunks; archive: bytes.
	Limit int `json:"limit,omitempty"`
	// logs: only chunks after this log stream sequence.
	After uint64 `json:"after,omitempty"`
	// logs: without After, begin with the job's last Tail lines of output
	// (at most MaxLogTail), counting only attempt Attempt's when it is set;
	// the chunks that follow are every attempt's.
	Tail    int `json:"tail,omitempty"`
	Attempt int `json:"attempt,omitempty"`
	// archive: the first byte wanted.
	Offset int64 `json:"offset,omitempty"`
	// wait: how many events of the job's audit trail the caller has seen.
	Seen int `json:"seen,omitempty"`
	// wait: how long to wait for a new event; job: how long to wait for a
	// just-submitted job to be recorded. At most MaxClientWait.
	Wait time.Duration `json:"wait,omitempty"`
	// list, count: only jobs placed on this pool; nodes, workers: only
	// those of this pool.
	Pool string `json:"pool,omitempty"`
	// retry: drop the job's checkpoints, so that it starts from nothing.
	Fresh bool `json:"fresh,omitempty"`
}

// ClientLogChunk is a piece of a job's output: one message of the log
// stream, Seq its stream sequence.
type ClientLogChunk struct {
	Seq     uint64 `json:"seq"`
	Attempt int    `json:"attempt"`
	Stream  string `json:"stream"`
	Data    string `json:"data"`
}

// ClientLogPage is a range of a job's output.
type ClientLogPage struct {
	Chunks []ClientLogChunk `json:"chunks"`
	// NextAfter is the after of the next range.
	NextAfter uint64 `json:"next_after"`
	// More is true when output after NextAfter was already stored.
	More bool `json:"more"`
	// Done is true when the job had finished before this range was read
	// and the range reaches the end of its output: nothing will follow.
	Done bool `json:"done"`
}

// ClientResults is where a succeeded job's outputs are: Bytes 0 and no
// SHA256 when it wrote none. The archive operation reads them.
type ClientResults struct {
	JobID  uuid.UUID `json:"job_id"`
	Bytes  int64     `json:"bytes"`
	SHA256 string    `json:"sha256,omitempty"`
	Region string    `json:"region,omitempty"`
}

// ClientWait is a wait answer: the job as recorded now and the events of
// its audit trail the caller had not seen, oldest first.
type ClientWait struct {
	Job    *Job    `json:"job"`
	Events []Event `json:"events"`
	// Seen is the Seen of the next wait.
	Seen int `json:"seen"`
}

// ClientJobList is a list answer: jobs, newest first.
type ClientJobList struct {
	Jobs []*Job `json:"jobs"`
	// NextCursor, when set, asks for the next page (ClientRequest.Cursor).
	NextCursor string `json:"next_cursor,omitempty"`
}

// ParseLabelFilter reads a label filter, key=value.
func ParseLabelFilter(s string) (key, value string, err error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok || key == "" {
		return "", "", fmt.Errorf("want key=value, got %q", s)
	}
	return key, value, nil
}

// ListCursor is where a listing, newest first, stopped: the last job's
// submission time and id, as an opaque string (the HTTP API's next_cursor
// and the client service's).
func ListCursor(at time.Time, id uuid.UUID) string {
	return base64.RawURLEncoding.EncodeToString([]byte(at.UTC().Format(time.RFC3339Nano) + "|" + id.String()))
}

// ParseListCursor reads a ListCursor.
func ParseListCursor(c string) (time.Time, uuid.UUID, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, uuid.Nil, err
	}
	ts, ids, ok := strings.Cut(string(b), "|")
	if !ok {
		return time.Time{}, uuid.Nil, errors.New("no separator")
	}
	at, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return time.Time{}, uuid.Nil, err
	}
	id, err := uuid.Parse(ids)
	return at, id, err
}

// ValidateProject checks a project name as a spec's project is checked.
func ValidateProject(project string) error {
	if !projectRe.MatchString(project) {
		return fmt.Errorf("must be 1–63 lower-case letters, digits, '-' or '_', starting with a letter or digit, got %q", project)
	}
	return nil
}
