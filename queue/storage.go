package queue

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// ErrQuotaExceeded is returned when recording an archive would take a
// project past its stored-bytes quota.
var ErrQuotaExceeded = errors.New("storage quota exceeded")

// Storage bounds what gpuq keeps: checkpoints per job and after a job
// finishes, bytes per project in the archive stores, and bytes per stream
// and bucket in JetStream. It is the `storage` section of the
// configuration.
type Storage struct {
	// KeepCheckpoints is how many of a job's latest checkpoints are kept;
	// older ones are deleted once a newer one is recorded. Default 3.
	KeepCheckpoints int
	// CheckpointRetention is how long a finished job's checkpoints are
	// kept. Default 168h (a week).
	CheckpointRetention time.Duration
	// PruneInterval is how often the control plane deletes pruned archives
	// and the checkpoints of jobs past retention. Default 10s.
	PruneInterval time.Duration
	// ProjectQuotaBytes caps what one project keeps in the archive stores
	// (checkpoints, results, pruned archives not yet deleted); 0 is no
	// cap. ProjectQuotas overrides it per project.
	ProjectQuotaBytes int64
	ProjectQuotas     map[string]int64
	// StreamMaxBytes caps each JetStream stream, by its short name
	// (submit, run, events, logs: GPUQ_SUBMIT, …); a stream left out gets
	// its DefaultStreamMaxBytes.
	StreamMaxBytes map[string]int64
	// BucketMaxBytes caps each archive bucket. Default 10 GiB.
	BucketMaxBytes int64
	// OrphanAge is how long an archive no record names, or an upload that
	// never finished, stays in its bucket before the control plane deletes
	// it: a worker killed between its upload and its record, or during its
	// upload, leaves one behind. It must outlast any upload and the record
	// that follows it. Default 1h; at least a minute.
	OrphanAge time.Duration
	// Unpack bounds what restoring or fetching one archive may write.
	Unpack ArchiveLimits
	// WorkdirMaxBytes bounds one uploaded working directory's archive.
	// Default DefaultWorkdirMaxBytes (100 MiB).
	WorkdirMaxBytes int64
	// WorkdirRetention is how long an uploaded working directory is kept
	// after its last upload. Default 720h (30 days).
	WorkdirRetention time.Duration
}

// DefaultStreamMaxBytes are the streams' byte caps when the configuration
// names none: a full submission or run stream refuses new messages (the
// submitter gets an error), a full events or logs stream drops its oldest.
var DefaultStreamMaxBytes = map[string]int64{
	"submit": 1 << 30,
	"run":    1 << 30,
	"events": 1 << 30,
	"logs":   4 << 30,
}

// StreamLimits are the byte caps of the streams by stream name, the
// defaults filled in, as EnsureStreams takes them (StreamOptions.MaxBytes).
func (s Storage) StreamLimits() map[string]int64 {
	out := map[string]int64{}
	for short, b := range DefaultStreamMaxBytes {
		if v, ok := s.StreamMaxBytes[short]; ok {
			b = v
		}
		out["GPUQ_"+strings.ToUpper(short)] = b
	}
	return out
}

// WithDefaults returns s with every unset default filled in.
func (s Storage) WithDefaults() Storage {
	if s.KeepCheckpoints == 0 {
		s.KeepCheckpoints = 3
	}
	if s.CheckpointRetention == 0 {
		s.CheckpointRetention = 7 * 24 * time.Hour
	}
	if s.PruneInterval == 0 {
		s.PruneInterval = 10 * time.Second
	}
	if s.BucketMaxBytes == 0 {
		s.BucketMaxBytes = 10 << 30
	}
	if s.OrphanAge == 0 {
		s.OrphanAge = time.Hour
	}
	if s.WorkdirMaxBytes == 0 {
		s.WorkdirMaxBytes = DefaultWorkdirMaxBytes
	}
	if s.WorkdirRetention == 0 {
		s.WorkdirRetention = 30 * 24 * time.Hour
	}
	s.Unpack = s.Unpack.WithDefaults()
	return s
}

// Validate refuses settings that cannot be applied, naming the key.
func (s Storage) Validate() error {
	switch {
	case s.KeepCheckpoints < 0 || s.KeepCheckpoints > 1000:
		return fmt.Errorf("storage.keep_checkpoints: must be 1–1000, got %d", s.KeepCheckpoints)
	case s.CheckpointRetention < 0:
		return fmt.Errorf("storage.checkpoint_retention: must not be negative, got %s", s.CheckpointRetention)
	case s.PruneInterval < 0:
		return fmt.Errorf("storage.prune_interval: must not be negative, got %s", s.PruneInterval)
	case s.ProjectQuotaBytes < 0:
		return fmt.Errorf("storage.project_quota: must not be negative, got %d", s.ProjectQuotaBytes)
	case s.BucketMaxBytes < 0:
		return fmt.Errorf("storage.bucket_max_bytes: must not be negative, got %d", s.BucketMaxBytes)
	case s.WorkdirMaxBytes < 0:
		return fmt.Errorf("storage.workdir_max_bytes: must not be negative, got %d", s.WorkdirMaxBytes)
	case s.WorkdirRetention != 0 && s.WorkdirRetention < time.Hour:
		return fmt.Errorf("storage.workdir_retention: must be at least 1h (a job waiting in its queue needs its directory), got %s", s.WorkdirRetention)
	case s.OrphanAge != 0 && s.OrphanAge < time.Minute:
		return fmt.Errorf("storage.orphan_age: must be at least 1m (it must outlast an upload and its record), got %s", s.OrphanAge)
	}
	if err := s.Unpack.Validate(); err != nil {
		return err
	}
	for p, q := range s.ProjectQuotas {
		if q < 0 {
			return fmt.Errorf("storage.project_quotas.%s: must not be negative, got %d", p, q)
		}
	}
	for name, b := range s.StreamMaxBytes {
		if _, ok := DefaultStreamMaxBytes[name]; !ok {
			return fmt.Errorf("storage.stream_max_bytes.%s: no such stream; streams are submit, run, events and logs", name)
		}
		if b < 0 {
			return fmt.Errorf("storage.stream_max_bytes.%s: must not be negative, got %d", name, b)
		}
	}
	return nil
}

// QuotaOf is a project's stored-bytes quota; 0 is none.
func (s Storage) QuotaOf(project string) int64 {
	if q, ok := s.ProjectQuotas[project]; ok {
		return q
	}
	return s.ProjectQuotaBytes
}

// ProjectQuota is a project's stored-bytes quota in effect: the one an
// admin set (source "admin", with who and when), else the config file's
// (source "config"); Bytes 0 is none.
type ProjectQuota struct {
	Project string     `json:"project"`
	Bytes   int64      `json:"quota_bytes" doc:"stored bytes the project may keep in checkpoints and results; 0: no quota"`
	Source  string     `json:"source" enum:"admin,config" doc:"admin: set through the API; config: the servers' storage.project_quotas / project_quota"`
	SetBy   string     `json:"set_by,omitempty"`
	SetAt   *time.Time `json:"set_at,omitempty"`
	// Stored is what the project keeps now.
	Stored int64 `json:"stored_bytes" doc:"what the project's checkpoints and results take now"`
}

// Garbage is the archive of a pruned checkpoint, still to be deleted from
// its store.
type Garbage struct {
	StoreURI string
	JobID    uuid.UUID
	Project  string
	Bytes    int64
}

// SweepResult is what one sweep of the archive buckets removed: archives no
// record names, and the chunks of uploads that never finished.
type SweepResult struct {
	// Archives is how many archives no record named were deleted, and
	// Bytes their size.
	Archives int
	Bytes    int64
	// Partial is how many unfinished uploads had their chunks purged.
	Partial int
}

// Add adds o to r.
func (r *SweepResult) Add(o SweepResult) {
	r.Archives += o.Archives
	r.Partial += o.Partial
	r.Bytes += o.Bytes
}
