package queue

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Streams, subjects and headers. Every subject carries the job id as its last
// token so that the reconciler can ask JetStream whether a job's message
// exists (GetLastMsgForSubject) without scanning.
const (
	StreamSubmit = "GPUQ_SUBMIT" // gpuq.submit.<project>, work queue
	StreamRun    = "GPUQ_RUN"    // gpuq.run.<pool>.<job>, work queue
	StreamEvents = "GPUQ_EVENTS" // gpuq.events.<job> and gpuq.replace.<job>, limits
	StreamLogs   = "GPUQ_LOGS"   // gpuq.logs.<pool>.<job>, limits, bounded per job and pool
	// StreamInstances carries the autoscaler's instances' state changes:
	// gpuq.instances.<pool>.<instance>, limits. Only the control plane may
	// publish there.
	StreamInstances = "GPUQ_INSTANCES"

	SchedulerConsumer = "scheduler"
	SchedulerAckWait  = 10 * time.Second

	HeaderJobID     = "Gpuq-Job-Id"
	HeaderPlacement = "Gpuq-Placement"
	HeaderAttempt   = "Gpuq-Attempt"
	HeaderStream    = "Gpuq-Stream"
)

// SubmitSubject is where submissions for project are published.
func SubmitSubject(project string) string { return "gpuq.submit." + project }

// RunSubject is where a placed job is published for its pool.
func RunSubject(pool, jobID string) string { return "gpuq.run." + pool + "." + jobID }

// EventSubject carries a job's state changes.
func EventSubject(jobID string) string { return "gpuq.events." + jobID }

// ReplaceSubject carries, a second time, the events of jobs a preempted
// worker handed back, for the control plane's replacer: it follows these
// alone instead of every event of every job.
func ReplaceSubject(jobID string) string { return "gpuq.replace." + jobID }

// LogSubject carries a job's output from its attempts on pool: a worker's
// credential may publish only under its own pool, so it cannot write into
// the output of a job another pool ran.
func LogSubject(pool, jobID string) string { return "gpuq.logs." + pool + "." + jobID }

// JobLogsSubject matches a job's output from every pool it ran on.
func JobLogsSubject(jobID string) string { return "gpuq.logs.*." + jobID }

// InstanceSubject carries the state changes of one instance of pool. An
// instance id that cannot be a subject token (gpuq's own never are) has its
// other characters replaced by '_'.
func InstanceSubject(pool, instance string) string {
	return "gpuq.instances." + subjectToken(pool) + "." + subjectToken(instance)
}

// PoolInstancesSubject matches the state changes of every instance of pool,
// or of every pool when pool is empty.
func PoolInstancesSubject(pool string) string {
	if pool == "" {
		return "gpuq.instances.*.*"
	}
	return "gpuq.instances." + subjectToken(pool) + ".*"
}

func subjectToken(s string) string {
	if s == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// PoolConsumer is the durable consumer shared by a pool's workers.
func PoolConsumer(pool string) string { return "pool-" + pool }

var poolRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidatePool checks that a pool id can be a subject token and a consumer name.
func ValidatePool(pool string) error {
	if !poolRe.MatchString(pool) {
		return fmt.Errorf("pool %q: must be 1–64 letters, digits, '-' or '_'", pool)
	}
	return nil
}

// StreamOptions size the streams. The zero value suits one machine.
type StreamOptions struct {
	// Replicas per stream; 3 on a production cluster. Default 1.
	Replicas int
	// DuplicateWindow is how long Nats-Msg-Id dedupe lasts. Default 2m.
	DuplicateWindow time.Duration
	// LogMessagesPerJob bounds the log chunks kept per job. Default 5000.
	LogMessagesPerJob int64
	// Retention of events and logs. Default 14 days.
	Retention time.Duration
	// MaxBytes caps streams by name (Storage.StreamLimits); a stream left
	// out is unbounded in bytes. A full submission or run stream refuses
	// new messages, so nothing accepted is dropped; a full events or logs
	// stream drops its oldest.
	MaxBytes map[string]int64
}

func (o StreamOptions) withDefaults() StreamOptions {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.DuplicateWindow == 0 {
		o.DuplicateWindow = 2 * time.Minute
	}
	if o.LogMessagesPerJob == 0 {
		o.LogMessagesPerJob = 5000
	}
	if o.Retention == 0 {
		o.Retention = 14 * 24 * time.Hour
	}
	return o
}

// ConsumerManager is the part of JetStream that creates durable consumers.
type ConsumerManager interface {
	CreateOrUpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error)
}

// StreamManager is the part of JetStream that creates gpuq's streams and the
// scheduler's consumer.
type StreamManager interface {
	ConsumerManager
	Stream(ctx context.Context, name string) (jetstream.Stream, error)
	CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error)
}

// EnsureStreams creates or updates gpuq's streams and the scheduler's
// consumer; it is safe to call from every process at start-up. A stream
// whose configuration is already the one asked for is left as it is: an
// update is not free (the server rewrites the stream's configuration while
// other processes create consumers on it).
func EnsureStreams(ctx context.Context, js StreamManager, o StreamOptions) error {
	o = o.withDefaults()
	configs := []jetstream.StreamConfig{
		{Name: StreamSubmit, Subjects: []string{"gpuq.submit.*"}, Retention: jetstream.WorkQueuePolicy, Discard: jetstream.DiscardNew,
			Storage: jetstream.FileStorage, Replicas: o.Replicas, Duplicates: o.DuplicateWindow, MaxMsgSize: MaxSpecBytes + 4096},
		{Name: StreamRun, Subjects: []string{"gpuq.run.*.*"}, Retention: jetstream.WorkQueuePolicy, Discard: jetstream.DiscardNew,
			Storage: jetstream.FileStorage, Replicas: o.Replicas, Duplicates: o.DuplicateWindow},
		{Name: StreamEvents, Subjects: []string{EventSubject("*"), ReplaceSubject("*")}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, Replicas: o.Replicas, MaxAge: o.Retention, MaxMsgsPerSubject: 1000,
			PersistMode: announcementPersistMode(o.Replicas)},
		{Name: StreamLogs, Subjects: []string{"gpuq.logs.*.*"}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, Replicas: o.Replicas, MaxAge: o.Retention, MaxMsgsPerSubject: o.LogMessagesPerJob, MaxMsgSize: 256 << 10},
		{Name: StreamInstances, Subjects: []string{PoolInstancesSubject("")}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, Replicas: o.Replicas, MaxAge: o.Retention, MaxMsgsPerSubject: 1000,
			Duplicates: o.DuplicateWindow, MaxMsgSize: 64 << 10},
	}
	for _, c := range configs {
		if b := o.MaxBytes[c.Name]; b > 0 {
			c.MaxBytes = b
		}
		if s, err := js.Stream(ctx, c.Name); err == nil {
			have := s.CachedInfo().Config
			// The server cannot change a stream's persist mode: a
			// stream made before keeps its own.
			c.PersistMode = have.PersistMode
			if sameStreamConfig(have, c) {
				continue
			}
		}
		if _, err := js.CreateOrUpdateStream(ctx, c); err != nil {
			return fmt.Errorf("creating stream %s: %w", c.Name, err)
		}
	}
	// A batch of submissions is handled in well under a second, so a short
	// AckWait lets a restarted scheduler take over a killed one's
	// unacknowledged submissions quickly; handling one twice is harmless.
	_, err := js.CreateOrUpdateConsumer(ctx, StreamSubmit, jetstream.ConsumerConfig{
		Durable: SchedulerConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: SchedulerAckWait,
		MaxAckPending: 10000,
	})
	if err != nil {
		return fmt.Errorf("creating the scheduler's consumer: %w", err)
	}
	return nil
}

// announcementPersistMode is how the events stream writes: asynchronously
// on a single server, so that the server batches the writes of many events
// instead of writing each one to its file as it arrives. Events announce
// what PostgreSQL has recorded already, so the few that a killed server had
// not written yet cost a watcher a delay (`gpuq wait` re-reads the job's
// trail when its events go quiet), never state. A replicated stream is
// written asynchronously anyway, behind its replication log, and the server
// refuses the setting there.
func announcementPersistMode(replicas int) jetstream.PersistModeType {
	if replicas > 1 {
		return jetstream.DefaultPersistMode
	}
	return jetstream.AsyncPersistMode
}

// sameStreamConfig reports whether a stream configured as have has every
// setting EnsureStreams asks for in want; a setting want leaves unset has
// the server's default.
func sameStreamConfig(have, want jetstream.StreamConfig) bool {
	unset := func(v int64) int64 {
		if v == 0 {
			return -1
		}
		return v
	}
	dup := want.Duplicates
	if dup == 0 {
		dup = 2 * time.Minute
	}
	return slices.Equal(have.Subjects, want.Subjects) && have.Retention == want.Retention && have.Discard == want.Discard &&
		have.Storage == want.Storage && have.Replicas == want.Replicas && have.Duplicates == dup &&
		int64(have.MaxMsgSize) == unset(int64(want.MaxMsgSize)) && have.MaxAge == want.MaxAge &&
		have.MaxMsgsPerSubject == unset(want.MaxMsgsPerSubject) && have.MaxBytes == unset(want.MaxBytes)
}

// EnsurePoolConsumer creates or updates the durable consumer of a pool.
// BackOff stays unset: it would override AckWait, and long jobs heartbeat
// with InProgress instead. MaxDeliver stays unlimited: gpuq counts attempts
// itself and declares a job dead after retries.max_preemptions.
func EnsurePoolConsumer(ctx context.Context, js ConsumerManager, pool string, ackWait time.Duration) (jetstream.Consumer, error) {
	if err := ValidatePool(pool); err != nil {
		return nil, err
	}
	c, err := js.CreateOrUpdateConsumer(ctx, StreamRun, jetstream.ConsumerConfig{
		Durable:       PoolConsumer(pool),
		FilterSubject: "gpuq.run." + pool + ".*",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxAckPending: 10000,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the consumer of pool %s: %w", pool, err)
	}
	return c, nil
}
