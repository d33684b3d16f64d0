package httpapi

import (
	"context"
	"fmt"

	"github.com/danielgtaylor/huma/v2"

	"github.com/gpuq/gpuq/queue"
)

// checkAfter refuses, at its place in the spec at location (spec, or
// body.jobs[i]), each job a spec's after, after_ended or inputs name that
// is not a job of its project; nothing is submitted then. A job it runs after that
// ended otherwise than succeeded is the scheduler's to reject, with the
// reason on the job.
func (s *Server) checkAfter(ctx context.Context, spec *queue.Spec, location string) error {
	if !spec.RunsAfter() {
		return nil
	}
	deps, err := s.cfg.Store.Dependencies(ctx, spec.AfterIDs())
	if err != nil {
		return internal(s.cfg.Logger, "reading the jobs a spec runs after", err)
	}
	own := make(map[string]bool, len(deps))
	for _, d := range deps {
		own[d.ID.String()] = d.Project == spec.Project
	}
	// A job an input reads is in after (or after_ended) too: it is
	// refused where its author named it.
	read := map[string]bool{}
	var bad []error
	for k, in := range spec.Inputs {
		if in.Job == "" {
			continue
		}
		read[in.Job] = true
		if !own[in.Job] {
			bad = append(bad, &huma.ErrorDetail{Location: fmt.Sprintf("%s.inputs[%d].job", location, k), Value: in.Job, Message: fmt.Sprintf(
				"no job %s in project %s: a job reads the outputs of jobs of its own project, submitted before it", in.Job, spec.Project)})
		}
	}
	for _, l := range []struct {
		key string
		ids []string
	}{{"after", spec.After}, {"after_ended", spec.AfterEnded}} {
		for i, a := range l.ids {
			if !own[a] && !read[a] {
				bad = append(bad, &huma.ErrorDetail{Location: fmt.Sprintf("%s.%s[%d]", location, l.key, i), Value: a, Message: fmt.Sprintf(
					"no job %s in project %s: a job runs after jobs of its own project, submitted before it", a, spec.Project)})
			}
		}
	}
	if len(bad) > 0 {
		return huma.Error422UnprocessableEntity("invalid job spec", bad...)
	}
	return nil
}
