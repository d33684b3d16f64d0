package queue

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// The worker service is how workers reach the system of record: NATS
// request/reply on gpuq.svc.worker.<pool>.<op>, served by every control plane
// in one queue group. The pool in the subject is the pool the worker's
// credential is scoped to; the service checks every request against it.
const (
	// WorkerServiceName is the nats micro service's name.
	WorkerServiceName = "gpuq-worker"
	// ControlQueueGroup is the queue group every control plane serves in.
	ControlQueueGroup = "gpuq-control"
	// WorkerServicePrefix starts every worker service subject.
	WorkerServicePrefix = "gpuq.svc.worker"
)

// Worker service operations, the last token of the subject.
const (
	WorkerOpClaim      = "claim"
	WorkerOpHeartbeat  = "heartbeat"
	WorkerOpNotice     = "notice"
	WorkerOpCheckpoint = "checkpoint"
	WorkerOpComplete   = "complete"
	WorkerOpFail       = "fail"
	WorkerOpHandback   = "handback"
	WorkerOpEnd        = "end"
	WorkerOpDead       = "dead"
	WorkerOpJob        = "job"
	WorkerOpNode       = "node"
	WorkerOpCanary     = "canary"
	// WorkerOpRestore asks for the checkpoint a claim returned in the
	// worker's own pool's bucket: one of another pool (the job was
	// re-placed) is copied there and recorded under the attempt.
	WorkerOpRestore = "restore"
	// WorkerOpWorkdir asks for the job's working directory (spec.workdir)
	// in the worker's own pool's bucket, copied there when it is not.
	WorkerOpWorkdir = "workdir"
	// WorkerOpSecrets asks for the values of the secrets the job names
	// (spec.secrets), read from its project's.
	WorkerOpSecrets = "secrets"
	// WorkerOpInputs asks for the outputs of the jobs the job reads
	// (spec.inputs' job entries), each copied into the worker's own pool's
	// bucket.
	WorkerOpInputs = "inputs"
)

// WorkerOps are the operations the worker service serves.
var WorkerOps = []string{WorkerOpClaim, WorkerOpHeartbeat, WorkerOpNotice, WorkerOpCheckpoint, WorkerOpComplete,
	WorkerOpFail, WorkerOpHandback, WorkerOpEnd, WorkerOpDead, WorkerOpJob, WorkerOpNode, WorkerOpCanary, WorkerOpRestore, WorkerOpWorkdir, WorkerOpSecrets, WorkerOpInputs}

// WorkerServiceSubject is the subject of op for a worker of pool.
func WorkerServiceSubject(pool, op string) string {
	return WorkerServicePrefix + "." + pool + "." + op
}

// WorkerSubjectParts splits a worker service subject into its pool and op.
func WorkerSubjectParts(subject string) (pool, op string, ok bool) {
	rest, ok := strings.CutPrefix(subject, WorkerServicePrefix+".")
	if !ok {
		return "", "", false
	}
	pool, op, ok = strings.Cut(rest, ".")
	if !ok || strings.Contains(op, ".") || ValidatePool(pool) != nil {
		return "", "", false
	}
	return pool, op, true
}

// WorkerInboxPrefix is the inbox prefix of a worker of pool, so that a
// worker credential may subscribe to its own replies only.
func WorkerInboxPrefix(pool string) string { return "_INBOX.worker." + pool }

// MaxWorkerBatch bounds the claims or completions one request carries.
const MaxWorkerBatch = 256

// WorkerRequest is the body of every worker service request; each operation
// reads the fields it needs.
type WorkerRequest struct {
	// Pool must equal the subject's pool.
	Pool     string `json:"pool"`
	WorkerID string `json:"worker_id"`

	// claim
	Claims []ClaimRequest `json:"claims,omitempty"`
	// heartbeat, notice, checkpoint, fail, handback, end, dead, job, restore,
	// workdir, secrets, inputs
	JobID   uuid.UUID `json:"job_id,omitzero"`
	Attempt int       `json:"attempt,omitempty"`
	// heartbeat, notice: the lease's new length.
	Lease time.Duration `json:"lease,omitempty"`
	// notice: the event's message; fail, handback, dead: the reason.
	Message string `json:"message,omitempty"`
	// checkpoint
	Archive *ArchiveRecord `json:"archive,omitempty"`
	// restore: the sequence number of the checkpoint to restore.
	Seq int `json:"seq,omitempty"`
	// complete
	Completions []Completion `json:"completions,omitempty"`
	// fail, handback, end
	Outcome  string `json:"outcome,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	// node
	NodeID string `json:"node_id,omitempty"`
	// canary
	Canary *CanaryRecord `json:"canary,omitempty"`
}

// Completion is one attempt's success; Outputs is nil when it left none.
type Completion struct {
	JobID   uuid.UUID      `json:"job_id"`
	Attempt int            `json:"attempt"`
	Outputs *ArchiveRecord `json:"outputs,omitempty"`
}

// WorkerReply is the body of every worker service reply.
type WorkerReply struct {
	Error *WireError `json:"error,omitempty"`
	// claim: one result per request, in order.
	Claims []WireClaimResult `json:"claims,omitempty"`
	// checkpoint: the sequence number recorded.
	Seq int `json:"seq,omitempty"`
	// restore: the checkpoint in the pool's own bucket.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	// workdir: the job's working directory in the pool's own bucket.
	Workdir *WorkdirCopy `json:"workdir,omitempty"`
	// inputs: one per input from a job, in the spec's order.
	Inputs []InputCopy `json:"inputs,omitempty"`
	// secrets: each secret the job names, by name. A reply holding them
	// is never logged.
	Secrets map[string]string `json:"secrets,omitempty"`
	// complete: one per completion, false when fenced out.
	Recorded []bool `json:"recorded,omitempty"`
	// job
	Job *Job `json:"job,omitempty"`
	// node, canary
	Node        *Node `json:"node,omitempty"`
	CanaryRunID int64 `json:"canary_run_id,omitempty"`
}

// WireClaimResult is one claim's outcome on the wire.
type WireClaimResult struct {
	Claimed *Claimed   `json:"claimed,omitempty"`
	Error   *WireError `json:"error,omitempty"`
}

// Wire error kinds.
const (
	WireFenced       = "fenced"
	WireNotFound     = "not_found"
	WireNotClaimable = "not_claimable"
	WireRefused      = "refused"
	WireBadRequest   = "bad_request"
	WireQuota        = "quota_exceeded"
	WireArchiveLost  = "archive_lost"
	// WireWorkdirMissing: the job's working directory is not stored.
	WireWorkdirMissing = "workdir_missing"
	// WireSecretMissing: a secret the job names is not set.
	WireSecretMissing = "secret_missing"
	// WireInputRefused: an input from a job may not be read where the
	// worker runs.
	WireInputRefused = "input_refused"
	WireInternal     = "internal"
)

// ErrInternal is a request the control plane could not carry out, most
// often because PostgreSQL was unreachable: unlike a fenced or refused
// request, asking again later may succeed.
var ErrInternal = errors.New("internal")

// WireError carries an error across the worker service so that the worker
// can act on its kind (fenced, not found, not claimable) as it would on the
// store's own errors.
type WireError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// not_claimable
	State     JobState      `json:"state,omitempty"`
	LeaseLeft time.Duration `json:"lease_left,omitempty"`
	Stale     bool          `json:"stale,omitempty"`
}

// ClaimRefusedError is a claim the control plane refused because the
// claiming pool may not run the job (its residency); the job was handed back
// for re-placement, and the worker drops the message.
type ClaimRefusedError struct {
	Reason string
}

func (e *ClaimRefusedError) Error() string { return "claim refused: " + e.Reason }

// EncodeError turns an error into its wire form; nil stays nil.
func EncodeError(err error) *WireError {
	if err == nil {
		return nil
	}
	var nc *NotClaimableError
	var refused *ClaimRefusedError
	switch {
	case errors.Is(err, ErrFenced):
		return &WireError{Kind: WireFenced, Message: err.Error()}
	case errors.Is(err, ErrNotFound):
		return &WireError{Kind: WireNotFound, Message: err.Error()}
	case errors.As(err, &nc):
		return &WireError{Kind: WireNotClaimable, Message: err.Error(), State: nc.State, LeaseLeft: nc.LeaseLeft, Stale: nc.Stale}
	case errors.As(err, &refused):
		return &WireError{Kind: WireRefused, Message: refused.Reason}
	case errors.Is(err, ErrQuotaExceeded):
		return &WireError{Kind: WireQuota, Message: err.Error()}
	case errors.Is(err, ErrArchiveLost):
		return &WireError{Kind: WireArchiveLost, Message: err.Error()}
	case errors.Is(err, ErrWorkdirMissing):
		return &WireError{Kind: WireWorkdirMissing, Message: err.Error()}
	case errors.Is(err, ErrSecretMissing):
		return &WireError{Kind: WireSecretMissing, Message: err.Error()}
	case errors.Is(err, ErrInputRefused):
		return &WireError{Kind: WireInputRefused, Message: err.Error()}
	}
	return &WireError{Kind: WireInternal, Message: err.Error()}
}

// Err turns a wire error back into the error the worker acts on.
func (e *WireError) Err() error {
	if e == nil {
		return nil
	}
	switch e.Kind {
	case WireFenced:
		return ErrFenced
	case WireNotFound:
		return fmt.Errorf("%s: %w", e.Message, ErrNotFound)
	case WireNotClaimable:
		return &NotClaimableError{State: e.State, LeaseLeft: e.LeaseLeft, Stale: e.Stale}
	case WireRefused:
		return &ClaimRefusedError{Reason: e.Message}
	case WireQuota:
		return &sentinelError{msg: e.Message, is: ErrQuotaExceeded}
	case WireArchiveLost:
		return &sentinelError{msg: e.Message, is: ErrArchiveLost}
	case WireWorkdirMissing:
		return &sentinelError{msg: e.Message, is: ErrWorkdirMissing}
	case WireSecretMissing:
		return &sentinelError{msg: e.Message, is: ErrSecretMissing}
	case WireInputRefused:
		return &sentinelError{msg: e.Message, is: ErrInputRefused}
	case WireInternal:
		return fmt.Errorf("worker service: %w: %s", ErrInternal, e.Message)
	}
	return fmt.Errorf("worker service: %s: %s", e.Kind, e.Message)
}

// sentinelError is an error of the control plane as the worker sees it:
// its message, matching the sentinel it was (ErrQuotaExceeded,
// ErrArchiveLost, ErrWorkdirMissing, ErrSecretMissing, ErrInputRefused).
type sentinelError struct {
	msg string
	is  error
}

func (e *sentinelError) Error() string { return e.msg }

func (e *sentinelError) Unwrap() error { return e.is }
