package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
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
// over NATS and PostgreSQL (directJobs) or the HTTP API (apiJobs). Both
// return the API's documents, so -o json prints the same either way.
type jobService interface {
	// Submit submits a validated spec and returns the job as far as it is
	// known: only its id and state pending when not yet recorded.
	Submit(ctx context.Context, spec *queue.Spec) (*queue.Job, error)
	// Job returns a job; queue.ErrNotFound when there is none.
	Job(ctx context.Context, id uuid.UUID) (*queue.Job, error)
	Status(ctx context.Context, id uuid.UUID) (*control.JobStatus, error)
	// Explain recomputes the job's current placement decision in full.
	Explain(ctx context.Context, id uuid.UUID) (*policy.Decision, error)
	List(ctx context.Context, f listFilter) (*JobPage, error)
	// Events calls fn with the job's latest state change and each later
	// one until fn returns false, the job is finished or ctx ends.
	Events(ctx context.Context, id uuid.UUID, fn func(queue.Event) bool) error
	Logs(ctx context.Context, id uuid.UUID, follow bool, fn func(queue.LogChunk) error) error
	Cancel(ctx context.Context, id uuid.UUID) (*queue.Job, error)
	// Results unpacks a succeeded job's outputs into dir and lists them; a
	// job that wrote none has no files.
	Results(ctx context.Context, id uuid.UUID, dir string) (*Results, error)
	Close()
}

// listFilter selects jobs for ls.
type listFilter struct {
	Project string
	State   queue.JobState
	Limit   int
}

// JobPage, Results and ResultFile are the API's documents, so that -o json
// prints what the API answers, whichever way the CLI is connected.
type (
	JobPage    = httpapi.JobPage
	Results    = httpapi.Results
	ResultFile = httpapi.ResultFile
)

// connectJobs returns the HTTP API client when an API URL is configured
// (--url, GPUQ_URL or `url:` in the config file) and --nats-url is not on
// the command line; else it connects to NATS and, when withDB, PostgreSQL
// (without it only Submit works).
func connectJobs(cmd *cobra.Command, v *viper.Viper, withDB bool) (jobService, error) {
	if v.GetString("url") != "" && !cmd.Flags().Changed("nats-url") {
		return newAPIJobs(v)
	}
	c, err := dial(cmd.Context(), v, withDB)
	if err != nil {
		return nil, err
	}
	return &directJobs{c: c}, nil
}

// directJobs serves the job commands from NATS and PostgreSQL.
type directJobs struct {
	c *clients
}

func (d *directJobs) Close() { d.c.Close() }

func (d *directJobs) Submit(ctx context.Context, spec *queue.Spec) (*queue.Job, error) {
	sub, err := queue.Submit(ctx, d.c.js, spec)
	if err != nil {
		return nil, err
	}
	return &queue.Job{ID: sub.JobID, Project: spec.Project, Name: spec.Name, IdempotencyKey: spec.IdempotencyKey,
		Spec: spec, State: queue.StatePending, SubmittedAt: time.Now().UTC()}, nil
}

func (d *directJobs) Job(ctx context.Context, id uuid.UUID) (*queue.Job, error) {
	return d.c.client().Job(ctx, id)
}

func (d *directJobs) Explain(ctx context.Context, id uuid.UUID) (*policy.Decision, error) {
	return control.Explain(ctx, d.c.store, id)
}

func (d *directJobs) Status(ctx context.Context, id uuid.UUID) (*control.JobStatus, error) {
	st, err := d.c.client().Status(ctx, id)
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
}

func (d *directJobs) List(ctx context.Context, f listFilter) (*JobPage, error) {
	jobs, err := d.c.client().List(ctx, queue.ListFilter{State: f.State, Project: f.Project, Limit: f.Limit})
	if err != nil {
		return nil, err
	}
	if jobs == nil {
		jobs = []*queue.Job{}
	}
	return &JobPage{Jobs: jobs}, nil
}

func (d *directJobs) Events(ctx context.Context, id uuid.UUID, fn func(queue.Event) bool) error {
	return queue.FollowEvents(ctx, d.c.js, id, func(ev queue.Event) bool {
		return fn(ev) && !ev.State.Terminal()
	})
}

func (d *directJobs) Logs(ctx context.Context, id uuid.UUID, follow bool, fn func(queue.LogChunk) error) error {
	return d.c.client().Logs(ctx, id, follow, fn)
}

func (d *directJobs) Cancel(ctx context.Context, id uuid.UUID) (*queue.Job, error) {
	if err := d.c.client().Cancel(ctx, id); err != nil {
		return nil, err
	}
	return d.c.store.Job(ctx, id)
}

func (d *directJobs) Results(ctx context.Context, id uuid.UUID, dir string) (*Results, error) {
	job, err := d.c.store.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	if job.State != queue.StateSucceeded {
		return nil, fmt.Errorf("job %s has no results: it is %s, not succeeded", id, job.State)
	}
	out := &Results{JobID: id, Files: []ResultFile{}}
	rec, err := d.c.client().Result(ctx, id)
	if errors.Is(err, queue.ErrNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	out.Bytes, out.SHA256, out.Region = rec.Bytes, rec.SHA256, rec.Region
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := fetchArchive(ctx, archiveStore(d.c), rec, dir); err != nil {
		return nil, err
	}
	out.Files, err = listFiles(dir)
	return out, err
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
