package queue

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
)

// ClaimRequest identifies the worker claiming a job.
type ClaimRequest struct {
	JobID            uuid.UUID
	PlacementVersion int
	Lease            time.Duration
	WorkerID         string
	Host             string
	PID              int
	Pool             string
	// NodeID is the machine the worker runs on, CanaryRunID the canary it
	// passed last (0 when the worker runs no canary).
	NodeID      string
	CanaryRunID int64
	// ClaimID names this claim request: a claim repeated with the same id
	// after its reply was lost returns the attempt it started.
	ClaimID uuid.UUID
	// Reply is the acknowledgement subject of the run message the claim is
	// made for, or "". The control plane naks it if the worker is declared
	// lost before a beat of its announces the attempt the claim started. A
	// reply it cannot use (CheckReply) is left out, and the claim made
	// without it.
	Reply string `json:",omitempty"`
	// Country is where the claiming pool lies, set by the control plane
	// from its pool registry and never taken from the worker: a job whose
	// residency excludes it is refused.
	Country string `json:"-"`
}

// MaxClaimantText bounds the worker id, host and node id a claim names.
const MaxClaimantText = 256

// CheckClaimant returns the field of a claim that names its worker in a way
// that cannot be recorded (text PostgreSQL cannot store or that carries
// control characters, text over MaxClaimantText bytes, a negative or
// oversized number), and what is wrong with it; "" when nothing is. The
// control plane refuses such a claim before any statement runs, so that a
// worker cannot fail a statement it shares with other workers' claims.
func (c ClaimRequest) CheckClaimant() (field, problem string) {
	for _, f := range []struct{ name, v string }{{"worker_id", c.WorkerID}, {"host", c.Host}, {"node_id", c.NodeID}} {
		if len(f.v) > MaxClaimantText {
			return f.name, fmt.Sprintf("%d bytes is over the %d-byte limit", len(f.v), MaxClaimantText)
		}
		if msg := badText(f.v, false); msg != "" {
			return f.name, msg
		}
	}
	switch {
	case c.PID < 0 || c.PID > math.MaxInt32:
		return "pid", fmt.Sprintf("must be 0–%d, got %d", math.MaxInt32, c.PID)
	case c.PlacementVersion < 1 || c.PlacementVersion > math.MaxInt32:
		return "placement_version", fmt.Sprintf("must be 1–%d, got %d", math.MaxInt32, c.PlacementVersion)
	case c.CanaryRunID < 0:
		return "canary_run_id", fmt.Sprintf("must not be negative, got %d", c.CanaryRunID)
	}
	return "", ""
}

// CheckReply reports whether the claim's reply subject, when it names one,
// is an acknowledgement subject of its pool's consumer on the run stream,
// as a beat's held attempts must be: the only subject the control plane
// may nak on the worker's word.
func (c ClaimRequest) CheckReply() error {
	if c.Reply == "" {
		return nil
	}
	return validAckReply(c.Reply, c.Pool)
}

// Claimed is a successful claim: the job under its new attempt and the
// checkpoint to resume from, if any.
type Claimed struct {
	Job        *Job
	Checkpoint *Checkpoint
	// SpecJSON is the job's spec as the system of record holds it. The
	// store leaves Job.Spec nil and fills SpecJSON: the control plane hands
	// it to the worker unparsed, and the worker parses it once (ParseSpec).
	SpecJSON json.RawMessage `json:",omitempty"`
}

// ParseSpec sets Job.Spec from SpecJSON, unless Job.Spec is set already.
func (c *Claimed) ParseSpec() error {
	if c.Job == nil || c.Job.Spec != nil {
		return nil
	}
	if len(c.SpecJSON) == 0 {
		return fmt.Errorf("claimed job %s: no spec", c.Job.ID)
	}
	var spec Spec
	if err := json.Unmarshal(c.SpecJSON, &spec); err != nil {
		return fmt.Errorf("decoding the spec of claimed job %s: %w", c.Job.ID, err)
	}
	c.Job.Spec = &spec
	return nil
}

// NotClaimableError says why a job could not be claimed.
type NotClaimableError struct {
	State JobState
	// LeaseLeft is how long another attempt's lease still runs.
	LeaseLeft time.Duration
	// Stale is true when the message belongs to an older placement.
	Stale bool
}

func (e *NotClaimableError) Error() string {
	switch {
	case e.Stale:
		return "the job was re-placed; this message is stale"
	case e.LeaseLeft > 0:
		return fmt.Sprintf("the job is running under another attempt (lease %s left)", e.LeaseLeft.Round(time.Millisecond))
	}
	return fmt.Sprintf("the job is %s", e.State)
}

// ClaimResult is the outcome of one request of ClaimMany: the claimed job, or
// why it could not be claimed (*NotClaimableError, ErrNotFound).
type ClaimResult struct {
	Claimed *Claimed
	Err     error
}

// AttemptRef names one attempt of one job.
type AttemptRef struct {
	JobID   uuid.UUID
	Attempt int
}

// PoolAttemptRef names an attempt a worker of Pool reports on; Pool ""
// names none, for writes whose pool was checked already.
type PoolAttemptRef struct {
	AttemptRef
	Pool string
}
