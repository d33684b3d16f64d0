package httpapi

import (
	"context"
	"fmt"

	"github.com/danielgtaylor/huma/v2"

	"github.com/gpuq/gpuq/queue"
)

// checkAfter refuses, at location[i], each job a spec's after names that is
// not a job of its project; nothing is submitted then. A job it runs after
// that ended otherwise than succeeded is the scheduler's to reject, with the
// reason on the job.
func (s *Server) checkAfter(ctx context.Context, spec *queue.Spec, location string) error {
	if len(spec.After) == 0 {
		return nil
	}
	deps, err := s.cfg.Store.Dependencies(ctx, queue.AfterIDs(spec.After))
	if err != nil {
		return internal(s.cfg.Logger, "reading the jobs a spec runs after", err)
	}
	own := make(map[string]bool, len(deps))
	for _, d := range deps {
		own[d.ID.String()] = d.Project == spec.Project
	}
	var bad []error
	for i, a := range spec.After {
		if !own[a] {
			bad = append(bad, &huma.ErrorDetail{Location: fmt.Sprintf("%s[%d]", location, i), Value: a, Message: fmt.Sprintf(
				"no job %s in project %s: a job runs after jobs of its own project, submitted before it", a, spec.Project)})
		}
	}
	if len(bad) > 0 {
		return huma.Error422UnprocessableEntity("invalid job spec", bad...)
	}
	return nil
}
