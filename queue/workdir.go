package queue

import (
	"errors"
	"regexp"
	"strings"

	"github.com/google/uuid"
)

// A job's working directory (spec.workdir) is a directory of the user's
// files, packed as a gzip-compressed tar by the client, uploaded once for
// the job's project and named in the spec by its digest. The control plane
// keeps it in its own bucket; a worker asks for a copy in its pool's bucket
// (worker service op workdir) and unpacks it where the command runs.
const (
	// WorkdirPrefix starts a spec's workdir: "sha256:" and 64 hex digits.
	WorkdirPrefix = "sha256:"
	// WorkdirBucket is the control plane's bucket of uploaded working
	// directories, objects named <project>/<sha256>.tar.gz. Only the
	// control plane's credential reaches it.
	WorkdirBucket = "gpuq-workdirs"
	// DefaultWorkdirMaxBytes bounds an uploaded working directory's archive
	// (storage.workdir_max_bytes).
	DefaultWorkdirMaxBytes = 100 << 20
)

var workdirDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)

// WorkdirDigest returns the hex digest a spec's workdir names, and whether
// it is one ("sha256:" and 64 lower-case hex digits).
func WorkdirDigest(workdir string) (string, bool) {
	hex, ok := strings.CutPrefix(workdir, WorkdirPrefix)
	return hex, ok && workdirDigest.MatchString(hex)
}

// WorkdirObject is the name of project's uploaded directory hex in
// WorkdirBucket.
func WorkdirObject(project, hex string) string { return project + "/" + hex + ".tar.gz" }

// WorkdirPoolObject is the name of a working directory's copy in a pool's
// bucket, which every worker of the pool may read.
func WorkdirPoolObject(project, hex string) string {
	return "workdirs/" + project + "/" + hex + ".tar.gz"
}

// WorkdirPoolCopy reports the project and digest of a working directory's
// copy that uri names in a pool's bucket (WorkdirPoolObject); ok is false
// for any other URI.
func WorkdirPoolCopy(uri string) (project, hex string, ok bool) {
	rest, found := strings.CutPrefix(uri, ArchiveScheme)
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || !strings.HasPrefix(parts[0], ArchiveBucketPrefix) || parts[1] != "workdirs" {
		return "", "", false
	}
	hex, found = strings.CutSuffix(parts[3], ".tar.gz")
	if !found || !workdirDigest.MatchString(hex) || ValidateProject(parts[2]) != nil {
		return "", "", false
	}
	return parts[2], hex, true
}

// WorkdirCopy is a working directory's copy in a worker's pool's bucket.
type WorkdirCopy struct {
	StoreURI string `json:"store_uri"`
	SHA256   string `json:"sha256"`
	Bytes    int64  `json:"bytes"`
}

// ErrWorkdirMissing is a working directory that is not stored for the
// job's project: never uploaded, or deleted storage.workdir_retention after
// its last upload.
var ErrWorkdirMissing = errors.New("working directory not stored")

// InputCopy is an input from a job (Input.Job) as a worker fetches it: the
// job's outputs copied into the worker's pool's bucket. StoreURI is empty
// when there are none to read: the job did not succeed (it is one of
// spec.after_ended), or succeeded leaving none.
type InputCopy struct {
	Name     string    `json:"name"`
	JobID    uuid.UUID `json:"job_id"`
	State    JobState  `json:"state"`
	StoreURI string    `json:"store_uri,omitempty"`
	SHA256   string    `json:"sha256,omitempty"`
	Bytes    int64     `json:"bytes,omitempty"`
}

// ErrInputRefused is an input from a job (Input.Job) that may not be read
// where the worker runs: the job's outputs are bound to a residency its
// pool lies outside.
var ErrInputRefused = errors.New("input refused")
