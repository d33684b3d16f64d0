package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"sigs.k8s.io/yaml"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

type submitInput struct {
	RawBody []byte `contentType:"application/yaml"`
}

type jobOutput struct {
	Status   int
	Location string `header:"Location"`
	Body     *queue.Job
}

type jobInput struct {
	ID uuid.UUID `path:"id" doc:"job id"`
}

type retryInput struct {
	ID    uuid.UUID `path:"id" doc:"job id"`
	Fresh bool      `query:"fresh" doc:"drop the job's checkpoints, so that it starts from nothing instead of resuming from its latest checkpoint"`
}

type jobBody struct {
	Body *queue.Job
}

type statusBody struct {
	Body *control.JobStatus
}

// JobFilter selects the jobs a listing shows and a count counts (the
// query of GET /v1/jobs and GET /v1/jobs/counts). It is exported because
// huma reads the parameters of an embedded struct only when it is.
type JobFilter struct {
	Project   string `query:"project" maxLength:"63" pattern:"^[a-z0-9][a-z0-9_-]{0,62}$" patternDescription:"a project name: 1–63 lower-case letters, digits, - or _, starting with a letter or digit" doc:"only jobs of this project (one of the token's)"`
	State     string `query:"state" enum:"pending,waiting,placed,running,succeeded,failed,cancelled,rejected,dead" doc:"only jobs in this state"`
	Label     string `query:"label" maxLength:"300" doc:"only jobs whose spec.labels has this entry, key=value"`
	Since     string `query:"since" doc:"only jobs submitted at or after this time (RFC 3339)"`
	RunsAfter string `query:"runs_after" maxLength:"36" doc:"only jobs that run after this job: their spec.after or spec.after_ended names it"`
	Pool      string `query:"pool" maxLength:"64" pattern:"^[A-Za-z0-9_-]+$" patternDescription:"a pool id: letters, digits, _ or -" doc:"only jobs placed on this pool (by their latest placement)"`
}

type listInput struct {
	JobFilter
	Cursor string `query:"cursor" maxLength:"200" doc:"next_cursor of the previous page"`
	Limit  int    `query:"limit" minimum:"1" maximum:"500" default:"50" doc:"jobs per page"`
}

type countOutput struct {
	Body *queue.JobCounts
}

// JobPage is one page of a job listing, newest first.
type JobPage struct {
	Jobs []*queue.Job `json:"jobs"`
	// NextCursor continues the listing; empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

type listOutput struct {
	Body *JobPage
}

func (s *Server) registerJobs(api huma.API) {
	jobSchema := api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[queue.Job](), true, "")
	register(api, huma.Operation{
		OperationID: "submit-job", Errors: []int{409, 413, 422}, Method: http.MethodPost, Path: "/v1/jobs", Tags: []string{"jobs"},
		Summary: "Submit a job",
		Description: "The body is a job spec (README \"Job spec\"), as JSON or YAML, parsed by the same strict parser as `gpuq submit`. " +
			"201: a new job. 200: a repeat of an earlier submission with the same idempotency_key and the same spec. " +
			"409: the idempotency_key names a job with a different spec. 202: accepted durably but not yet recorded by the scheduler.",
		DefaultStatus: http.StatusCreated,
		MaxBodyBytes:  queue.MaxSpecBytes + 1,
		RequestBody:   specBody(api),
		// queue.ParseSpec is the one judge of a spec.
		SkipValidateBody: true,
		Responses: map[string]*huma.Response{
			"200": {Description: "the job an earlier submission with this idempotency key created", Content: map[string]*huma.MediaType{"application/json": {Schema: jobSchema}}},
			"202": {Description: "submitted durably; not yet recorded", Content: map[string]*huma.MediaType{"application/json": {Schema: jobSchema}}},
		},
		Metadata: map[string]any{metaRole: queue.RoleSubmit},
	}, s.submit)
	s.registerBatch(api)
	register(api, huma.Operation{
		OperationID: "list-jobs", Errors: []int{422}, Method: http.MethodGet, Path: "/v1/jobs", Tags: []string{"jobs"},
		Summary:  "List jobs of the token's projects, newest first",
		Metadata: map[string]any{metaRole: queue.RoleRead},
	}, s.list)
	register(api, huma.Operation{
		OperationID: "count-jobs", Errors: []int{422}, Method: http.MethodGet, Path: "/v1/jobs/counts", Tags: []string{"jobs"},
		Summary: "Count the jobs a listing with the same filters would show, by state",
		Description: "How far a sweep has come: `GET /v1/jobs/counts?label=sweep=lr` counts every job of the token's projects " +
			"(or of `project`) whose labels hold that entry, by state, every state present (0 for those no job is in).",
		Metadata: map[string]any{metaRole: queue.RoleRead},
	}, s.count)
	register(api, huma.Operation{
		OperationID: "get-job", Errors: []int{404, 422}, Method: http.MethodGet, Path: "/v1/jobs/{id}", Tags: []string{"jobs"},
		Summary:  "Get a job",
		Metadata: map[string]any{metaRole: queue.RoleRead},
	}, s.get)
	register(api, huma.Operation{
		OperationID: "get-job-status", Errors: []int{404, 422}, Method: http.MethodGet, Path: "/v1/jobs/{id}/status", Tags: []string{"jobs"},
		Summary:     "Get a job with its attempts, latest checkpoint, placement and history",
		Description: "The same document as `gpuq status -o json`; a failed or dead job carries its last 20 lines of output.",
		Metadata:    map[string]any{metaRole: queue.RoleRead},
	}, s.status)
	register(api, huma.Operation{
		OperationID: "cancel-job", Errors: []int{404, 409, 422}, Method: http.MethodPost, Path: "/v1/jobs/{id}/cancel", Tags: []string{"jobs"},
		Summary:     "Cancel a job that has not finished",
		Description: "A running job is stopped at once. 409 when the job has already finished.",
		Metadata:    map[string]any{metaRole: queue.RoleSubmit},
	}, s.cancel)
	register(api, huma.Operation{
		OperationID: "retry-job", Errors: []int{404, 409, 422, 501}, Method: http.MethodPost, Path: "/v1/jobs/{id}/retry", Tags: []string{"jobs"},
		Summary: "Run a job that failed, died, was cancelled or was rejected again",
		Description: "The job keeps its id and is placed afresh under the policy, offers and budgets in effect now; " +
			"its counts of errors and preemptions start again from zero, and its next attempt resumes from its latest checkpoint " +
			"(with `fresh=true`, its checkpoints are dropped and it starts from nothing). " +
			"A job whose `after` names a job that has not finished goes back to `waiting` instead, and is placed once the jobs it runs after have succeeded. " +
			"409 when the job has not finished or succeeded (a job succeeds once); 422 when no placement takes it now, or a job it runs after ended otherwise than succeeded (the reason says why), and then nothing changed.",
		Metadata: map[string]any{metaRole: queue.RoleSubmit},
	}, s.retry)
}

// specBody documents a job spec request body: JSON with the spec's schema,
// or the same document as YAML. queue.ParseSpec reads both; it also takes
// a command given as one shell string.
func specBody(api huma.API) *huma.RequestBody {
	return &huma.RequestBody{Required: true, Content: map[string]*huma.MediaType{
		"application/json": {Schema: api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[queue.Spec](), true, "")},
	}}
}

func (s *Server) submit(ctx context.Context, in *submitInput) (*jobOutput, error) {
	tok := tokenOf(ctx)
	spec, err := queue.ParseSpec(in.RawBody)
	if err != nil {
		return nil, specProblem(err)
	}
	fillProject(tok, in.RawBody, spec)
	if !tok.Sees(spec.Project) {
		return nil, projectForbidden(tok, spec, "spec.project", "")
	}
	if spec.IdempotencyKey != "" {
		existing, err := s.cfg.Store.Job(ctx, queue.JobIDFor(spec))
		switch {
		case err == nil:
			return s.repeated(existing, spec)
		case !errors.Is(err, queue.ErrNotFound):
			return nil, internal(s.cfg.Logger, "reading job", err)
		}
	}
	if err := s.checkWorkdir(ctx, spec, "spec.workdir"); err != nil {
		return nil, err
	}
	if err := s.checkSecrets(ctx, spec, "spec"); err != nil {
		return nil, err
	}
	if err := s.checkAfter(ctx, spec, "spec"); err != nil {
		return nil, err
	}
	sub, err := s.submitOne(ctx, spec)
	if err != nil {
		return nil, err
	}
	return s.answer(ctx, spec, sub)
}

// submitOne publishes a submission.
func (s *Server) submitOne(ctx context.Context, spec *queue.Spec) (queue.Submitted, error) {
	sub, err := queue.Submit(ctx, s.cfg.JS, spec)
	if err != nil {
		if errors.Is(err, queue.ErrInvalidSpec) {
			return sub, specProblem(err)
		}
		return sub, internal(s.cfg.Logger, "submitting job", err)
	}
	return sub, nil
}

// answer is a published submission's answer: 201 with the job once the
// scheduler recorded it, 200 with the job an earlier submission created,
// 202 when it is not recorded yet.
func (s *Server) answer(ctx context.Context, spec *queue.Spec, sub queue.Submitted) (*jobOutput, error) {
	job, err := s.recordedJob(ctx, sub.JobID)
	if errors.Is(err, queue.ErrNotFound) {
		now := time.Now().UTC()
		return &jobOutput{Status: http.StatusAccepted, Location: "/v1/jobs/" + sub.JobID.String(), Body: &queue.Job{
			ID: sub.JobID, Project: spec.Project, Name: spec.Name, IdempotencyKey: spec.IdempotencyKey, Spec: spec,
			State: queue.StatePending, SubmittedAt: now, UpdatedAt: now}}, nil
	}
	if err != nil {
		return nil, internal(s.cfg.Logger, "reading job", err)
	}
	if sub.Duplicate || spec.IdempotencyKey != "" && !sameSpec(job.Spec, spec) {
		return s.repeated(job, spec)
	}
	return &jobOutput{Status: http.StatusCreated, Location: "/v1/jobs/" + job.ID.String(), Body: job}, nil
}

// recordedJob returns a just-submitted job once the scheduler has recorded
// it, waiting up to RecordWait for its first event.
func (s *Server) recordedJob(ctx context.Context, id uuid.UUID) (*queue.Job, error) {
	if s.recorded == nil {
		return s.client.Job(ctx, id)
	}
	// Waiting starts before the store is asked: an event announced in
	// between is not missed, since it follows the commit.
	announced, stop := s.recorded.wait(id)
	defer stop()
	job, err := s.cfg.Store.Job(ctx, id)
	if !errors.Is(err, queue.ErrNotFound) {
		return job, err
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.RecordWait)
	defer cancel()
	select {
	case <-announced:
	case <-wctx.Done():
	}
	return s.cfg.Store.Job(ctx, id)
}

// repeated answers a submission whose job already exists: 200 with it when
// the spec is the same, 409 when the idempotency key came with another.
func (s *Server) repeated(job *queue.Job, spec *queue.Spec) (*jobOutput, error) {
	if !sameSpec(job.Spec, spec) {
		return nil, huma.Error409Conflict("idempotency_key "+spec.IdempotencyKey+" already names job "+job.ID.String()+" with a different spec",
			&huma.ErrorDetail{Location: "spec.idempotency_key", Message: "already used with a different spec", Value: spec.IdempotencyKey})
	}
	return &jobOutput{Status: http.StatusOK, Location: "/v1/jobs/" + job.ID.String(), Body: job}, nil
}

// sameSpec compares specs as they would be recorded.
func sameSpec(a, b *queue.Spec) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

// fillProject gives a spec whose document names no project the project of
// a token of one project.
func fillProject(tok *queue.Token, doc []byte, spec *queue.Spec) {
	if !projectGiven(doc) && len(tok.Projects) == 1 && !tok.CoversAll() && spec.Project != tok.Projects[0] {
		spec.Project = tok.Projects[0]
	}
}

// projectForbidden is the 403 for a spec whose project the token does not
// cover, located at location; more ends its message.
func projectForbidden(tok *queue.Token, spec *queue.Spec, location, more string) error {
	return huma.Error403Forbidden("this token may not submit into project "+spec.Project+more,
		&huma.ErrorDetail{Location: location, Message: "not one of this token's projects: " + strings.Join(tok.Projects, ", "), Value: spec.Project})
}

// projectGiven reports whether a spec document names its project; a token
// of one project fills in its project where the spec does not.
func projectGiven(doc []byte) bool {
	var probe struct {
		Project *string `json:"project"`
	}
	return yaml.Unmarshal(doc, &probe) == nil && probe.Project != nil
}

// ownJob returns the job when the token covers its project, else 404.
func (s *Server) ownJob(ctx context.Context, id uuid.UUID) (*queue.Job, error) {
	job, err := s.cfg.Store.Job(ctx, id)
	if errors.Is(err, queue.ErrNotFound) || err == nil && !tokenOf(ctx).Sees(job.Project) {
		return nil, jobNotFound(id)
	}
	if err != nil {
		return nil, internal(s.cfg.Logger, "reading job", err)
	}
	return job, nil
}

func (s *Server) get(ctx context.Context, in *jobInput) (*jobBody, error) {
	job, err := s.ownJob(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	return &jobBody{Body: job}, nil
}

func (s *Server) status(ctx context.Context, in *jobInput) (*statusBody, error) {
	if _, err := s.ownJob(ctx, in.ID); err != nil {
		return nil, err
	}
	st, err := s.client.Status(ctx, in.ID)
	if err != nil {
		return nil, internal(s.cfg.Logger, "reading job status", err)
	}
	if st.Attempts == nil {
		st.Attempts = []queue.Attempt{}
	}
	if st.History == nil {
		st.History = []queue.Event{}
	}
	return &statusBody{Body: st}, nil
}

func (s *Server) cancel(ctx context.Context, in *jobInput) (*jobBody, error) {
	job, err := s.ownJob(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	if job.State.Terminal() {
		return nil, huma.Error409Conflict("job " + in.ID.String() + " already finished: " + string(job.State))
	}
	if err := s.client.Cancel(ctx, in.ID); err != nil {
		if strings.Contains(err.Error(), "already finished") {
			return nil, huma.Error409Conflict(err.Error())
		}
		return nil, internal(s.cfg.Logger, "cancelling job", err)
	}
	if job, err = s.cfg.Store.Job(ctx, in.ID); err != nil {
		return nil, internal(s.cfg.Logger, "reading job", err)
	}
	return &jobBody{Body: job}, nil
}

func (s *Server) retry(ctx context.Context, in *retryInput) (*jobBody, error) {
	if _, err := s.ownJob(ctx, in.ID); err != nil {
		return nil, err
	}
	job, err := s.client.Retry(ctx, in.ID, in.Fresh)
	var nr *queue.NotRetryableError
	var rej *queue.RejectionError
	switch {
	case errors.As(err, &nr):
		return nil, huma.Error409Conflict("job " + in.ID.String() + " cannot be retried: " + nr.Error())
	case errors.As(err, &rej):
		return nil, huma.Error422UnprocessableEntity("job " + in.ID.String() + " cannot be placed now, so it was not retried: " + rej.Reason)
	case errors.Is(err, control.ErrRetryUnavailable):
		return nil, huma.Error501NotImplemented(err.Error())
	case err != nil:
		return nil, internal(s.cfg.Logger, "retrying job", err)
	}
	return &jobBody{Body: job}, nil
}

// page is the listing of the token's jobs the filter selects; none of
// its projects when it names a project the token does not cover.
func (f *JobFilter) page(ctx context.Context) (queue.Page, error) {
	tok := tokenOf(ctx)
	p := queue.Page{Projects: tok.Projects, State: queue.JobState(f.State), Pool: f.Pool}
	if f.Project != "" {
		p.Projects = nil
		if tok.Sees(f.Project) {
			p.Projects = []string{f.Project}
		}
	}
	if f.Label != "" {
		k, v, err := queue.ParseLabelFilter(f.Label)
		if err != nil {
			return queue.Page{}, fieldProblem("query.label", "%s", err)
		}
		p.LabelKey, p.LabelValue = k, v
	}
	if f.RunsAfter != "" {
		if !queue.ValidJobID(f.RunsAfter) {
			return queue.Page{}, fieldProblem("query.runs_after", "must be a job id as gpuq prints it, got %q", f.RunsAfter)
		}
		p.RunsAfter = uuid.MustParse(f.RunsAfter)
	}
	if f.Since != "" {
		t, err := time.Parse(time.RFC3339Nano, f.Since)
		if err != nil {
			return queue.Page{}, fieldProblem("query.since", "want an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", f.Since)
		}
		p.Since = t
	}
	return p, nil
}

// count counts the token's jobs the filter selects, by state.
func (s *Server) count(ctx context.Context, in *JobFilter) (*countOutput, error) {
	p, err := in.page(ctx)
	if err != nil {
		return nil, err
	}
	c := queue.NoJobs()
	if len(p.Projects) > 0 {
		if c, err = s.cfg.Store.CountJobs(ctx, p); err != nil {
			return nil, internal(s.cfg.Logger, "counting jobs", err)
		}
	}
	return &countOutput{Body: &c}, nil
}

func (s *Server) list(ctx context.Context, in *listInput) (*listOutput, error) {
	p, err := in.page(ctx)
	if err != nil {
		return nil, err
	}
	p.Limit = in.Limit + 1
	if in.Cursor != "" {
		at, id, err := queue.ParseListCursor(in.Cursor)
		if err != nil {
			return nil, fieldProblem("query.cursor", "not a cursor this API returned")
		}
		p.AfterAt, p.AfterID = at, id
	}
	if len(p.Projects) == 0 {
		return &listOutput{Body: &JobPage{Jobs: []*queue.Job{}}}, nil
	}
	jobs, err := s.cfg.Store.ListPage(ctx, p)
	if err != nil {
		return nil, internal(s.cfg.Logger, "listing jobs", err)
	}
	page := &JobPage{Jobs: jobs}
	if len(jobs) > in.Limit {
		page.Jobs = jobs[:in.Limit]
		last := page.Jobs[len(page.Jobs)-1]
		page.NextCursor = queue.ListCursor(last.SubmittedAt, last.ID)
	}
	return &listOutput{Body: page}, nil
}
