package httpapi

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
)

// specProblem is the 422 for a spec the strict parser refused: one error
// detail per field, located by its path (spec.resources.gpu.count).
func specProblem(err error) error {
	var se *queue.SpecError
	if !errors.As(err, &se) {
		return huma.Error422UnprocessableEntity(err.Error())
	}
	details := make([]error, len(se.Problems))
	for i, p := range se.Problems {
		details[i] = &huma.ErrorDetail{Message: p.Message, Location: p.Field}
	}
	return huma.Error422UnprocessableEntity("invalid job spec", details...)
}

// jobNotFound is the answer for a job that does not exist or belongs to a
// project the token does not cover: the same either way, so ids do not leak.
func jobNotFound(id uuid.UUID) error {
	return huma.Error404NotFound(fmt.Sprintf("job %s not found", id))
}

// internal logs err and answers 500 without the details.
func internal(logger *slog.Logger, what string, err error) error {
	logger.Error(what, "err", err)
	return huma.Error500InternalServerError(what + " failed; see the server log")
}

// fieldProblem is a 422 naming the request field at fault.
func fieldProblem(location, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	return huma.Error422UnprocessableEntity(location+": "+msg, &huma.ErrorDetail{Location: location, Message: msg})
}
