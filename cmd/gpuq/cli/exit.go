package cli

import (
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
)

// Exit statuses of the job commands (submit, wait, status, logs, cancel,
// results), so that scripts can tell outcomes apart without parsing text.
// README "Exit status" lists them.
const (
	// ExitGeneral: bad input, no connection, a server error.
	ExitGeneral = 1
	// ExitRejected: the scheduler rejected the job (residency, budget, no
	// feasible offer); the same status as `gpuq plan` finding no offer.
	ExitRejected = 2
	// ExitFailed: the job exited non-zero more often than its retries allow.
	ExitFailed = 3
	// ExitCancelled: the job was cancelled.
	ExitCancelled = 4
	// ExitDead: the job was preempted, lost or handed back after a host error
	// more often than allowed.
	ExitDead = 5
	// ExitNotFound: no such job (or not one the caller may see).
	ExitNotFound = 6
	// ExitTimedOut: --timeout ran out before the job got where it was
	// waited for; the job itself goes on.
	ExitTimedOut = 7
	// ExitInterrupted: Ctrl-C (SIGINT) ended the command, as a shell counts
	// a process ended by it (128 + 2); a job waited for or followed goes on.
	ExitInterrupted = 130
)

// outcomeError is nil for a succeeded job and otherwise the exit status of
// its terminal state, with its reason.
func outcomeError(job *queue.Job) error {
	code := map[queue.JobState]int{
		queue.StateRejected:  ExitRejected,
		queue.StateFailed:    ExitFailed,
		queue.StateCancelled: ExitCancelled,
		queue.StateDead:      ExitDead,
	}[job.State]
	if code == 0 {
		return nil
	}
	msg := fmt.Sprintf("job %s %s", job.ID, job.State)
	if job.Reason != "" {
		msg += ": " + job.Reason
	}
	return &ExitError{Code: code, Err: errors.New(msg)}
}

// notFoundError gives a missing job its exit status.
func notFoundError(id uuid.UUID, err error) error {
	if errors.Is(err, queue.ErrNotFound) {
		return &ExitError{Code: ExitNotFound, Err: fmt.Errorf("job %s not found", id)}
	}
	return err
}
