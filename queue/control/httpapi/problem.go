package httpapi

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
)

// specProblem is the 422 for a spec the strict parser refused: one error
// detail per field, located by its path (spec.resources.gpu.count).
func specProblem(err error) error {
	var se *queue.SpecError
	if !errors.As(err, &se) {
		return huma.Error422UnprocessableEntity(err.Error())
	}
	return huma.Error422UnprocessableEntity("invalid job spec", specDetails(err, "spec")...)
}

// specDetails is a problem detail for each problem of a spec error, each
// field located under at (spec.resources.gpu.count, or in a batch
// body.jobs[3].resources.gpu.count); an error of another kind is one
// detail at at.
func specDetails(err error, at string) []error {
	var se *queue.SpecError
	if !errors.As(err, &se) {
		return []error{&huma.ErrorDetail{Location: at, Message: err.Error()}}
	}
	details := make([]error, len(se.Problems))
	for i, p := range se.Problems {
		loc := p.Field
		if rest, ok := strings.CutPrefix(p.Field, "spec"); ok {
			loc = at + rest
		}
		details[i] = &huma.ErrorDetail{Location: loc, Message: p.Message}
	}
	return details
}

// jobNotFound is the answer for a job that does not exist or belongs to a
// project the token does not cover: the same either way, so ids do not leak.
func jobNotFound(id uuid.UUID) error {
	return huma.Error404NotFound(fmt.Sprintf("job %s not found", id))
}

// internal logs err and answers without the details: 503 with
// Retry-After when PostgreSQL or NATS could not be reached for a moment (a
// restart), which clients retry, else 500.
func internal(logger *slog.Logger, what string, err error) error {
	logger.Error(what, "err", err)
	if unreachable(err) {
		return huma.ErrorWithHeaders(huma.Error503ServiceUnavailable(what+" failed: the server's database or message bus is unreachable; try again"),
			http.Header{"Retry-After": []string{"1"}})
	}
	return huma.Error500InternalServerError(what + " failed; see the server log")
}

// unreachable tells an error of reaching PostgreSQL or NATS (refused,
// dropped, the server shutting down) from one of the request or of the
// server itself.
func unreachable(err error) bool {
	var netErr net.Error
	var coded interface{ SQLState() string } // PostgreSQL's errors
	switch {
	case errors.As(err, &coded):
		// Class 08: connection exception; 57P: the server is shutting down
		// or starting.
		state := coded.SQLState()
		return strings.HasPrefix(state, "08") || strings.HasPrefix(state, "57P")
	case errors.As(err, &netErr), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone):
		return true
	}
	for _, e := range []error{nats.ErrConnectionClosed, nats.ErrDisconnected, nats.ErrConnectionReconnecting, nats.ErrNoResponders,
		nats.ErrTimeout, jetstream.ErrNoStreamResponse} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// fieldProblem is a 422 naming the request field at fault.
func fieldProblem(location, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	return huma.Error422UnprocessableEntity(location+": "+msg, &huma.ErrorDetail{Location: location, Message: msg})
}
