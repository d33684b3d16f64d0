package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strconv"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"sigs.k8s.io/yaml"

	"github.com/gpuq/gpuq/queue"
)

// A batch submission bounds its jobs and its body; every batchJobsPerRequest
// of its jobs count as one request against the token's rate limit.
const (
	MaxBatchJobs        = 500
	MaxBatchBytes       = 8 << 20
	batchJobsPerRequest = 10
)

type batchInput struct {
	RawBody []byte `contentType:"application/yaml"`
}

// BatchItem is one job of a batch submission's answer.
type BatchItem struct {
	// Status is what submitting the spec alone would have answered: 201 a
	// new job, 200 the job an earlier submission with the same
	// idempotency_key and spec created, 202 a job accepted durably but not
	// yet recorded by the scheduler.
	Status int        `json:"status" enum:"200,201,202"`
	Job    *queue.Job `json:"job"`
}

// Batch answers a batch submission: one item per spec, in their order.
type Batch struct {
	Jobs []BatchItem `json:"jobs"`
}

type batchOutput struct {
	Body *Batch
}

// batchRequest documents the body of a batch submission (maxItems is
// MaxBatchJobs; a struct tag cannot name it).
type batchRequest struct {
	Jobs []queue.Spec `json:"jobs" minItems:"1" maxItems:"500" doc:"job specs, each as POST /v1/jobs takes one"`
}

func (s *Server) registerBatch(api huma.API) {
	register(api, huma.Operation{
		OperationID: "submit-jobs", Errors: []int{409, 413, 422}, Method: http.MethodPost, Path: "/v1/jobs/batch", Tags: []string{"jobs"},
		Summary: "Submit a batch of jobs (a sweep) in one request",
		Description: fmt.Sprintf("The body is {\"jobs\": [spec, …]} as JSON or YAML: 1–%d job specs, each read as POST /v1/jobs reads one. "+
			"The batch is checked as a whole before anything is submitted: a bad spec is 422 naming body.jobs[i] and the field, "+
			"a project the token does not cover 403, an idempotency_key that names a job with another spec 409; then nothing is submitted. "+
			"The answer lists each job in the order of the specs, with the status submitting it alone would have had. "+
			"Every %d jobs of a batch count as one request against the token's rate limit.", MaxBatchJobs, batchJobsPerRequest),
		MaxBodyBytes:     MaxBatchBytes,
		RequestBody:      &huma.RequestBody{Required: true, Content: map[string]*huma.MediaType{"application/json": {Schema: api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[batchRequest](), true, "")}}},
		SkipValidateBody: true,
		Metadata:         map[string]any{metaRole: queue.RoleSubmit},
	}, s.submitBatch)
}

func (s *Server) submitBatch(ctx context.Context, in *batchInput) (*batchOutput, error) {
	tok := tokenOf(ctx)
	docs, err := batchDocs(in.RawBody)
	if err != nil {
		return nil, err
	}
	specs := make([]*queue.Spec, len(docs))
	var bad []error
	for i, doc := range docs {
		spec, err := queue.ParseSpec(doc)
		if err != nil {
			bad = append(bad, specDetails(err, fmt.Sprintf("body.jobs[%d]", i))...)
			continue
		}
		fillProject(tok, doc, spec)
		specs[i] = spec
	}
	if len(bad) > 0 {
		return nil, huma.Error422UnprocessableEntity("invalid job spec in the batch; nothing was submitted", bad...)
	}
	for i, spec := range specs {
		if !tok.Sees(spec.Project) {
			return nil, projectForbidden(tok, spec, fmt.Sprintf("body.jobs[%d].project", i), "; nothing was submitted")
		}
	}
	existing, err := s.batchConflicts(ctx, specs)
	if err != nil {
		return nil, err
	}
	for i, spec := range specs {
		if existing[i] == nil {
			if err := s.checkWorkdir(ctx, spec, fmt.Sprintf("body.jobs[%d].workdir", i)); err != nil {
				return nil, err
			}
			if err := s.checkSecrets(ctx, spec, fmt.Sprintf("body.jobs[%d]", i)); err != nil {
				return nil, err
			}
			if err := s.checkAfter(ctx, spec, fmt.Sprintf("body.jobs[%d]", i)); err != nil {
				return nil, err
			}
		}
	}
	cost := (len(specs) + batchJobsPerRequest - 1) / batchJobsPerRequest
	if wait := s.auth.limitN(tok.ID, cost-1); wait > 0 {
		return nil, huma.ErrorWithHeaders(huma.NewError(http.StatusTooManyRequests,
			fmt.Sprintf("rate limit of this token exceeded: a batch of %d jobs counts as %d requests; nothing was submitted; retry after the Retry-After seconds", len(specs), cost)),
			http.Header{"Retry-After": []string{strconv.Itoa(int(math.Ceil(wait.Seconds())))}})
	}
	// Every job is submitted before any is waited for, so that the
	// scheduler places them together.
	out := &Batch{Jobs: make([]BatchItem, len(specs))}
	subs := make([]queue.Submitted, len(specs))
	for i, spec := range specs {
		if job := existing[i]; job != nil {
			out.Jobs[i] = BatchItem{Status: http.StatusOK, Job: job}
			continue
		}
		if subs[i], err = s.submitOne(ctx, spec); err != nil {
			return nil, err
		}
	}
	for i, spec := range specs {
		if out.Jobs[i].Job != nil {
			continue
		}
		res, err := s.answer(ctx, spec, subs[i])
		if err != nil {
			return nil, err
		}
		out.Jobs[i] = BatchItem{Status: res.Status, Job: res.Body}
	}
	return &batchOutput{Body: out}, nil
}

// batchDocs splits a batch's body, JSON or YAML, into its job specs'
// documents.
func batchDocs(body []byte) ([][]byte, error) {
	data, err := yaml.YAMLToJSON(body)
	if err != nil {
		return nil, huma.Error422UnprocessableEntity("the batch is neither JSON nor YAML", &huma.ErrorDetail{Location: "body", Message: err.Error()})
	}
	var doc struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, huma.Error422UnprocessableEntity("the batch must be an object holding jobs, a list of job specs",
			&huma.ErrorDetail{Location: "body", Message: err.Error()})
	}
	if len(doc.Jobs) == 0 || len(doc.Jobs) > MaxBatchJobs {
		return nil, huma.Error422UnprocessableEntity(fmt.Sprintf("a batch holds 1–%d jobs", MaxBatchJobs),
			&huma.ErrorDetail{Location: "body.jobs", Message: fmt.Sprintf("must hold 1–%d job specs, got %d", MaxBatchJobs, len(doc.Jobs))})
	}
	docs := make([][]byte, len(doc.Jobs))
	for i, j := range doc.Jobs {
		docs[i] = j
	}
	return docs, nil
}

// batchConflicts returns, for each spec whose idempotency key already names
// a job, that job; 409 when the job was submitted with another spec, or
// when two specs of the batch share a key with different specs.
func (s *Server) batchConflicts(ctx context.Context, specs []*queue.Spec) ([]*queue.Job, error) {
	existing := make([]*queue.Job, len(specs))
	first := map[uuid.UUID]int{}
	for i, spec := range specs {
		if spec.IdempotencyKey == "" {
			continue
		}
		id := queue.JobIDFor(spec)
		conflict := func(what string) error {
			return huma.Error409Conflict("idempotency_key "+spec.IdempotencyKey+" "+what+"; nothing was submitted",
				&huma.ErrorDetail{Location: fmt.Sprintf("body.jobs[%d].idempotency_key", i), Message: "already used with a different spec", Value: spec.IdempotencyKey})
		}
		if k, ok := first[id]; ok {
			if !sameSpec(specs[k], spec) {
				return nil, conflict(fmt.Sprintf("is used by jobs[%d] of the batch with a different spec", k))
			}
			continue
		}
		first[id] = i
		job, err := s.cfg.Store.Job(ctx, id)
		switch {
		case errors.Is(err, queue.ErrNotFound):
			continue
		case err != nil:
			return nil, internal(s.cfg.Logger, "reading job", err)
		case !sameSpec(job.Spec, spec):
			return nil, conflict("already names job " + job.ID.String() + " with a different spec")
		}
		existing[i] = job
	}
	return existing, nil
}
