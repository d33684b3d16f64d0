package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/queue"
)

// ServiceRecords is Records over the control plane's worker service: NATS
// request/reply on gpuq.svc.worker.<pool>.<op>. The worker holds no
// database credential; the control plane does the fenced writes.
//
// A request whose reply is lost (the server that took it died) is sent
// again only when repeating it cannot apply it twice: reads and lease
// refreshes; claims, which carry a claim id the repeat returns the attempt
// of; checkpoint records, unique by archive name; completions, failures and
// hand-backs, fenced by attempt, which the service answers as done when the
// attempt already ended so. Notices and canary reports are sent once.
type ServiceRecords struct {
	NATS *nats.Conn
	// Pool is the pool the worker's credential is scoped to.
	Pool     string
	WorkerID string
	// Timeout bounds one request when the caller's context has no
	// deadline. Default 10s.
	Timeout time.Duration
	// Tries is how often an idempotent request is sent before giving up.
	// Default 3.
	Tries int
}

// NewServiceRecords returns the worker service client of a worker of pool.
func NewServiceRecords(nc *nats.Conn, pool, workerID string) *ServiceRecords {
	return &ServiceRecords{NATS: nc, Pool: pool, WorkerID: workerID}
}

var _ Records = (*ServiceRecords)(nil)

// ErrNoControlPlane is returned when no control plane answered a request.
var ErrNoControlPlane = errors.New("no control plane answered the worker service request")

func (r *ServiceRecords) call(ctx context.Context, op string, req *queue.WorkerRequest, idempotent bool) (*queue.WorkerReply, error) {
	req.Pool, req.WorkerID = r.Pool, r.WorkerID
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	timeout, tries := r.Timeout, r.Tries
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if tries <= 0 {
		tries = 3
	}
	if !idempotent {
		tries = 1
	}
	subject := queue.WorkerServiceSubject(r.Pool, op)
	var last error
	for try := range tries {
		if try > 0 {
			select {
			case <-time.After(queue.RetryDelay(try, 100*time.Millisecond, 2*time.Second)):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if _, ok := ctx.Deadline(); !ok {
			rctx, cancel = context.WithTimeout(ctx, timeout)
		}
		msg, err := r.NATS.RequestWithContext(rctx, subject, body)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
				last = fmt.Errorf("%s %s: %w", op, subject, ErrNoControlPlane)
				continue
			}
			return nil, fmt.Errorf("worker service %s: %w", op, err)
		}
		var reply queue.WorkerReply
		if err := json.Unmarshal(msg.Data, &reply); err != nil {
			return nil, fmt.Errorf("worker service %s: reading the reply: %w", op, err)
		}
		if reply.Error != nil {
			return &reply, reply.Error.Err()
		}
		return &reply, nil
	}
	return nil, last
}

// ClaimMany claims a batch of jobs. It is repeated after a lost reply only
// when every claim carries a ClaimID.
func (r *ServiceRecords) ClaimMany(ctx context.Context, reqs []queue.ClaimRequest) ([]queue.ClaimResult, error) {
	idempotent := !slices.ContainsFunc(reqs, func(c queue.ClaimRequest) bool { return c.ClaimID == uuid.Nil })
	reply, err := r.call(ctx, queue.WorkerOpClaim, &queue.WorkerRequest{Claims: reqs}, idempotent)
	if err != nil {
		return nil, err
	}
	if len(reply.Claims) != len(reqs) {
		return nil, fmt.Errorf("worker service claim: %d results for %d claims", len(reply.Claims), len(reqs))
	}
	out := make([]queue.ClaimResult, len(reqs))
	for i, c := range reply.Claims {
		out[i] = queue.ClaimResult{Claimed: c.Claimed, Err: c.Error.Err()}
		if c.Error == nil && (c.Claimed == nil || c.Claimed.Job == nil) {
			out[i].Err = fmt.Errorf("worker service claim: result %d holds no job", i)
		}
	}
	return out, nil
}

// Heartbeat extends the attempt's lease; repeating it is harmless.
func (r *ServiceRecords) Heartbeat(ctx context.Context, id uuid.UUID, attempt int, lease time.Duration) error {
	_, err := r.call(ctx, queue.WorkerOpHeartbeat, &queue.WorkerRequest{JobID: id, Attempt: attempt, Lease: lease}, true)
	return err
}

// RecordNotice records a provider's warning on the job's trail.
func (r *ServiceRecords) RecordNotice(ctx context.Context, id uuid.UUID, attempt int, message string, lease time.Duration) error {
	_, err := r.call(ctx, queue.WorkerOpNotice, &queue.WorkerRequest{JobID: id, Attempt: attempt, Message: message, Lease: lease}, false)
	return err
}

// RecordCheckpoint records a committed checkpoint under attempt.
func (r *ServiceRecords) RecordCheckpoint(ctx context.Context, id uuid.UUID, attempt int, a queue.ArchiveRecord) (int, error) {
	reply, err := r.call(ctx, queue.WorkerOpCheckpoint, &queue.WorkerRequest{JobID: id, Attempt: attempt, Archive: &a}, true)
	if err != nil {
		return 0, err
	}
	return reply.Seq, nil
}

// restoreTimeout bounds a restore, which may copy a large checkpoint from
// another pool's bucket when the caller's context has no deadline.
const restoreTimeout = 10 * time.Minute

// RestoreCheckpoint returns checkpoint seq of the job in the worker's own
// pool's bucket: the control plane copies one another pool stored there and
// records the copy under attempt. Repeating it finds the same copy.
func (r *ServiceRecords) RestoreCheckpoint(ctx context.Context, id uuid.UUID, attempt, seq int) (*queue.Checkpoint, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, restoreTimeout)
		defer cancel()
	}
	reply, err := r.call(ctx, queue.WorkerOpRestore, &queue.WorkerRequest{JobID: id, Attempt: attempt, Seq: seq}, true)
	if err != nil {
		return nil, err
	}
	if reply.Checkpoint == nil {
		return nil, fmt.Errorf("worker service restore: the reply holds no checkpoint")
	}
	return reply.Checkpoint, nil
}

// Workdir returns the job's working directory (spec.workdir) in the
// worker's own pool's bucket: the control plane copies it there when it is
// not.
func (r *ServiceRecords) Workdir(ctx context.Context, id uuid.UUID, attempt int) (*queue.WorkdirCopy, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, restoreTimeout)
		defer cancel()
	}
	reply, err := r.call(ctx, queue.WorkerOpWorkdir, &queue.WorkerRequest{JobID: id, Attempt: attempt}, true)
	if err != nil {
		return nil, err
	}
	if reply.Workdir == nil {
		return nil, fmt.Errorf("worker service workdir: the reply names no copy")
	}
	return reply.Workdir, nil
}

// Inputs returns the inputs of the job from other jobs (spec.inputs' job
// entries), in the spec's order, their outputs copied into the worker's
// own pool's bucket.
func (r *ServiceRecords) Inputs(ctx context.Context, id uuid.UUID, attempt int) ([]queue.InputCopy, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, restoreTimeout)
		defer cancel()
	}
	reply, err := r.call(ctx, queue.WorkerOpInputs, &queue.WorkerRequest{JobID: id, Attempt: attempt}, true)
	if err != nil {
		return nil, err
	}
	return reply.Inputs, nil
}

// Secrets returns the values of the secrets the job names (spec.secrets),
// by name.
func (r *ServiceRecords) Secrets(ctx context.Context, id uuid.UUID, attempt int) (map[string]string, error) {
	reply, err := r.call(ctx, queue.WorkerOpSecrets, &queue.WorkerRequest{JobID: id, Attempt: attempt}, true)
	if err != nil {
		return nil, err
	}
	return reply.Secrets, nil
}

// Succeed records the attempt's success and its outputs.
func (r *ServiceRecords) Succeed(ctx context.Context, id uuid.UUID, attempt int, outputs *queue.ArchiveRecord) error {
	recorded, err := r.complete(ctx, []queue.Completion{{JobID: id, Attempt: attempt, Outputs: outputs}})
	if err == nil && !recorded[0] {
		err = queue.ErrFenced
	}
	return err
}

// SucceedMany records the success of a batch of attempts without outputs.
func (r *ServiceRecords) SucceedMany(ctx context.Context, refs []queue.AttemptRef) ([]bool, error) {
	cs := make([]queue.Completion, len(refs))
	for i, ref := range refs {
		cs[i] = queue.Completion{JobID: ref.JobID, Attempt: ref.Attempt}
	}
	return r.complete(ctx, cs)
}

func (r *ServiceRecords) complete(ctx context.Context, cs []queue.Completion) ([]bool, error) {
	reply, err := r.call(ctx, queue.WorkerOpComplete, &queue.WorkerRequest{Completions: cs}, true)
	if err != nil {
		return nil, err
	}
	if len(reply.Recorded) != len(cs) {
		return nil, fmt.Errorf("worker service complete: %d results for %d completions", len(reply.Recorded), len(cs))
	}
	return reply.Recorded, nil
}

// Fail finalises the job as failed under attempt.
func (r *ServiceRecords) Fail(ctx context.Context, id uuid.UUID, attempt int, outcome string, exit *int, reason string) error {
	_, err := r.call(ctx, queue.WorkerOpFail, &queue.WorkerRequest{JobID: id, Attempt: attempt, Outcome: outcome, ExitCode: exit, Message: reason}, true)
	return err
}

// Requeue hands the job back to its pool under attempt.
func (r *ServiceRecords) Requeue(ctx context.Context, id uuid.UUID, attempt int, outcome string, exit *int, reason string) error {
	_, err := r.call(ctx, queue.WorkerOpHandback, &queue.WorkerRequest{JobID: id, Attempt: attempt, Outcome: outcome, ExitCode: exit, Message: reason}, true)
	return err
}

// EndAttempt closes an attempt without touching the job; repeating it is
// harmless (it closes only an open attempt).
func (r *ServiceRecords) EndAttempt(ctx context.Context, id uuid.UUID, attempt int, outcome string, exit *int) error {
	_, err := r.call(ctx, queue.WorkerOpEnd, &queue.WorkerRequest{JobID: id, Attempt: attempt, Outcome: outcome, ExitCode: exit}, true)
	return err
}

// MarkDead finalises a job that can no longer make progress.
func (r *ServiceRecords) MarkDead(ctx context.Context, id uuid.UUID, attempt int, reason string) error {
	_, err := r.call(ctx, queue.WorkerOpDead, &queue.WorkerRequest{JobID: id, Attempt: attempt, Message: reason}, true)
	return err
}

// Job reads one job.
func (r *ServiceRecords) Job(ctx context.Context, id uuid.UUID) (*queue.Job, error) {
	reply, err := r.call(ctx, queue.WorkerOpJob, &queue.WorkerRequest{JobID: id}, true)
	if err != nil {
		return nil, err
	}
	if reply.Job == nil {
		return nil, fmt.Errorf("job %s: %w", id, queue.ErrNotFound)
	}
	return reply.Job, nil
}

// Node reads one node.
func (r *ServiceRecords) Node(ctx context.Context, id string) (*queue.Node, error) {
	reply, err := r.call(ctx, queue.WorkerOpNode, &queue.WorkerRequest{NodeID: id}, true)
	if err != nil {
		return nil, err
	}
	if reply.Node == nil {
		return nil, fmt.Errorf("node %s: %w", id, queue.ErrNotFound)
	}
	return reply.Node, nil
}

// RecordCanary records one canary run of the worker's node.
func (r *ServiceRecords) RecordCanary(ctx context.Context, rec queue.CanaryRecord) (int64, *queue.Node, error) {
	reply, err := r.call(ctx, queue.WorkerOpCanary, &queue.WorkerRequest{Canary: &rec}, false)
	if err != nil {
		return 0, nil, err
	}
	return reply.CanaryRunID, reply.Node, nil
}
