package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

// Workdir is an uploaded working directory, as a spec names it.
type Workdir struct {
	Workdir string `json:"workdir" doc:"what a job spec's workdir names it by: sha256: and its archive's digest"`
	Project string `json:"project"`
	Bytes   int64  `json:"bytes" doc:"the archive's size"`
}

type workdirInput struct {
	SHA256  string `path:"sha256" minLength:"64" maxLength:"64" pattern:"^[0-9a-f]{64}$" patternDescription:"a SHA-256 as 64 lower-case hex digits" doc:"the SHA-256 of the body"`
	Project string `query:"project" maxLength:"63" pattern:"^[a-z0-9][a-z0-9_-]{0,62}$" patternDescription:"a project name: 1–63 lower-case letters, digits, - or _, starting with a letter or digit" doc:"the project whose jobs may name it; default: the token's project when it has one, else default"`
	body    io.Reader
}

// workdirUploadTimeout bounds how long an upload may take to arrive: 100
// MiB at about 1 Mbit/s, so that a client sending slowly cannot hold a
// connection and a temporary file for ever.
const workdirUploadTimeout = 15 * time.Minute

// Resolve keeps the request's body for the handler to read as it arrives:
// an archive of up to storage.workdir_max_bytes is not held in memory.
func (in *workdirInput) Resolve(ctx huma.Context) []error {
	ctx.SetReadDeadline(time.Now().Add(workdirUploadTimeout)) //nolint:errcheck // a server without deadlines serves it without one
	in.body = ctx.BodyReader()
	return nil
}

type workdirOutput struct {
	Body *Workdir
}

func (s *Server) registerWorkdirs(api huma.API) {
	register(api, huma.Operation{
		OperationID: "upload-workdir", Errors: []int{413, 422, 501}, Method: http.MethodPut, Path: "/v1/workdirs/{sha256}", Tags: []string{"jobs"},
		Summary: "Upload a working directory for jobs to run in",
		Description: "The body is a directory packed as a gzip-compressed tar (`tar -czf`), whose SHA-256 is the path's. " +
			"A job spec of the project names it as `workdir: sha256:<digest>`; its worker unpacks it and runs the command there. " +
			"It is kept storage.workdir_retention (30 days by default) after its last upload; uploading it again is harmless and keeps it longer. " +
			"413 when the body is over storage.workdir_max_bytes (100 MiB by default); 422 when its SHA-256 is not the path's or it is not gzip-compressed; " +
			"501 when the server keeps no working directories.",
		RequestBody: &huma.RequestBody{Required: true, Content: map[string]*huma.MediaType{
			"application/gzip": {Schema: &huma.Schema{Type: huma.TypeString, Format: "binary"}}}},
		Metadata: map[string]any{metaRole: queue.RoleSubmit},
	}, s.uploadWorkdir)
}

func (s *Server) uploadWorkdir(ctx context.Context, in *workdirInput) (*workdirOutput, error) {
	if s.cfg.Workdirs == nil {
		return nil, huma.Error501NotImplemented("this server keeps no working directories")
	}
	tok := tokenOf(ctx)
	project := in.Project
	if project == "" {
		project = "default"
		if len(tok.Projects) == 1 && !tok.CoversAll() {
			project = tok.Projects[0]
		}
	}
	if !tok.Sees(project) {
		return nil, huma.Error403Forbidden("this token may not upload for project "+project,
			&huma.ErrorDetail{Location: "query.project", Message: "not one of this token's projects", Value: project})
	}
	n, err := s.cfg.Workdirs.Upload(ctx, project, in.SHA256, in.body)
	var tooLarge *control.WorkdirTooLargeError
	var refused *control.WorkdirRefusedError
	switch {
	case errors.As(err, &tooLarge):
		return nil, huma.Error413RequestEntityTooLarge("the working directory's archive is too large",
			&huma.ErrorDetail{Location: "body", Message: fmt.Sprintf("at most %d bytes (storage.workdir_max_bytes)", tooLarge.Limit)})
	case errors.As(err, &refused):
		loc := "body"
		if refused.Field == "sha256" {
			loc = "path.sha256"
		}
		return nil, huma.Error422UnprocessableEntity("the upload is not the working directory it names",
			&huma.ErrorDetail{Location: loc, Message: refused.Message})
	case err != nil:
		return nil, internal(s.cfg.Logger, "storing a working directory", err)
	}
	return &workdirOutput{Body: &Workdir{Workdir: queue.WorkdirPrefix + in.SHA256, Project: project, Bytes: n}}, nil
}

// checkWorkdir refuses a spec whose working directory is not stored for its
// project, located at location (spec.workdir, or body.jobs[i].workdir).
func (s *Server) checkWorkdir(ctx context.Context, spec *queue.Spec, location string) error {
	sum, ok := queue.WorkdirDigest(spec.Workdir)
	if !ok {
		return nil
	}
	if s.cfg.Workdirs == nil {
		return huma.Error422UnprocessableEntity("this server keeps no working directories",
			&huma.ErrorDetail{Location: location, Message: "this server keeps no working directories; leave out workdir", Value: spec.Workdir})
	}
	kept, err := s.cfg.Workdirs.Has(ctx, spec.Project, sum)
	if err != nil {
		return internal(s.cfg.Logger, "looking up a working directory", err)
	}
	if !kept {
		return huma.Error422UnprocessableEntity("invalid job spec",
			&huma.ErrorDetail{Location: location, Value: spec.Workdir, Message: fmt.Sprintf(
				"%s is not uploaded for project %s (never uploaded, or deleted storage.workdir_retention after its last upload): PUT /v1/workdirs/%s?project=%s first",
				spec.Workdir, spec.Project, sum, spec.Project)})
	}
	return nil
}
