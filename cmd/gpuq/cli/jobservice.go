package cli

import (
	"context"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/control/httpapi"
)

// jobService is what the job commands (submit, status, ls, logs, wait,
// cancel, results) need: either the control plane's client operations
// over NATS (natsJobs) or the HTTP API (apiJobs). Both
// return the API's documents, so -o json prints the same either way.
type jobService interface {
	// Submit submits a validated spec and returns the job as far as it is
	// known: only its id and state pending when not yet recorded.
	Submit(ctx context.Context, spec *queue.Spec) (*queue.Job, error)
	// SubmitMany submits validated specs in their order, counting each
	// submitted on done; on an error it returns the jobs submitted before
	// it, which go on.
	SubmitMany(ctx context.Context, specs []*queue.Spec, done func(n int)) ([]*queue.Job, error)
	// Job returns a job; queue.ErrNotFound when there is none.
	Job(ctx context.Context, id uuid.UUID) (*queue.Job, error)
	Status(ctx context.Context, id uuid.UUID) (*control.JobStatus, error)
	// Explain recomputes the job's current placement decision in full.
	Explain(ctx context.Context, id uuid.UUID) (*policy.Decision, error)
	List(ctx context.Context, f listFilter) (*JobPage, error)
	// Count counts the jobs the filter selects (its limit aside), by state.
	Count(ctx context.Context, f listFilter) (*queue.JobCounts, error)
	// Events calls fn with the job's latest state change and each later
	// one until fn returns false, the job is finished or ctx ends.
	Events(ctx context.Context, id uuid.UUID, fn func(queue.Event) bool) error
	// Logs calls fn with each chunk of the job's output read as r says.
	Logs(ctx context.Context, id uuid.UUID, r logRead, fn func(queue.LogChunk) error) error
	Cancel(ctx context.Context, id uuid.UUID) (*queue.Job, error)
	Retry(ctx context.Context, id uuid.UUID, fresh bool) (*queue.Job, error)
	// Results unpacks a succeeded job's outputs into dir and lists them; a
	// job that wrote none has no files. The download is counted on shown,
	// which may be nil.
	Results(ctx context.Context, id uuid.UUID, dir string, lim queue.ArchiveLimits, shown *transfer) (*Results, error)
	// Nodes lists worker nodes, of pool only when it is set.
	Nodes(ctx context.Context, pool string) ([]*queue.Node, error)
	// Workers lists the live workers, of pool only when it is set.
	Workers(ctx context.Context, pool string) ([]queue.LiveWorker, error)
	Close()
}

// listFilter selects jobs for ls.
type listFilter struct {
	Project string
	State   queue.JobState
	Label   string
	Since   time.Time
	// RunsAfter keeps the jobs that run after this one.
	RunsAfter uuid.UUID
	// Pool keeps the jobs placed on this pool.
	Pool  string
	Limit int
}

// maxListPage is the most jobs one page of a listing asks for: the HTTP
// API's and the client service's bound.
const maxListPage = queue.MaxClientList

// JobPage, Results and ResultFile are the API's documents, so that -o json
// prints what the API answers, whichever way the CLI is connected.
type (
	JobPage    = httpapi.JobPage
	Results    = httpapi.Results
	ResultFile = httpapi.ResultFile
)

// connectJobs returns the HTTP API client when an API URL is configured
// (--url, GPUQ_URL or `url:` in the config file) and --nats-url is not on
// the command line; else the control plane's client service over NATS.
// Neither opens PostgreSQL.
func connectJobs(cmd *cobra.Command, v *viper.Viper) (jobService, error) {
	if v.GetString("url") != "" && !cmd.Flags().Changed("nats-url") {
		return newAPIJobs(v)
	}
	return newNATSJobs(v)
}

// listFiles lists the regular files under dir, paths relative to it.
func listFiles(dir string) ([]ResultFile, error) {
	files := []ResultFile{}
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		files = append(files, ResultFile{Path: filepath.ToSlash(rel), Bytes: info.Size()})
		return err
	})
	return files, err
}

// logRead says how a job's output is read: from its first line, or from
// where its last Tail lines begin (counting only attempt Attempt's when it
// is set); with Follow, until the job finishes.
type logRead struct {
	Follow  bool
	Tail    int
	Attempt int
}
