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

// ErrArchiveLost is what reading an archive returns when the archive a
// record names is not in its store, or is no longer what was recorded (its
// hash differs): asking again cannot bring it back.
var ErrArchiveLost = errors.New("archive lost")

// RecordRefused reports whether err, the answer to a checkpoint or output
// record, is a definite refusal: nothing was recorded (the attempt was fenced
// out, or the project's storage quota is full), so the archive it named may
// be deleted. Any other error leaves open whether the record was written (a
// commit whose reply was lost, a control plane that answered too late): the
// archive then stays, since a record may name it.
func RecordRefused(err error) bool {
	return errors.Is(err, ErrFenced) || errors.Is(err, ErrQuotaExceeded)
}
