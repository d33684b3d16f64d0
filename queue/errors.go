package queue

import "errors"

// ErrNotFound is returned when a job (or its checkpoint, result…) does not exist.
var ErrNotFound = errors.New("not found")

// ErrFenced is returned when a write carries an attempt number that is no
// longer the job's current running attempt: a newer worker owns the job.
var ErrFenced = errors.New("fenced: the job is no longer running under this attempt")

// RejectionError is returned by a Placer when no placement satisfies the
// job; the job is rejected with Reason.
type RejectionError struct {
	Reason string
}

func (e *RejectionError) Error() string { return e.Reason }
