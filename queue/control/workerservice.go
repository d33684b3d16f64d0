package control

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"golang.org/x/sync/singleflight"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/batch"
)

// WorkerStore is what the worker service needs from the system of record:
// the fenced writes workers ask for, and the reads that answer them.
type WorkerStore interface {
	ClaimMany(ctx context.Context, reqs []queue.ClaimRequest) ([]queue.ClaimResult, error)
	Heartbeat(ctx context.Context, id uuid.UUID, attempt int, lease time.Duration) error
	RecordCheckpoint(ctx context.Context, id uuid.UUID, attempt int, a queue.ArchiveRecord) (int, error)
	RecordNotice(ctx context.Context, id uuid.UUID, attempt int, message string, lease time.Duration) error
	Succeed(ctx context.Context, id uuid.UUID, attempt int, outputs *queue.ArchiveRecord) error
	SucceedInPools(ctx context.Context, refs []queue.PoolAttemptRef) ([]bool, error)
	Fail(ctx context.Context, id uuid.UUID, attempt int, outcome string, exit *int, reason string) error
	Requeue(ctx context.Context, id uuid.UUID, attempt int, outcome string, exit *int, reason string) error
	EndAttempt(ctx context.Context, id uuid.UUID, attempt int, outcome string, exit *int) error
	MarkDead(ctx context.Context, id uuid.UUID, attempt int, reason string) error
	Job(ctx context.Context, id uuid.UUID) (*queue.Job, error)
	Node(ctx context.Context, id string) (*queue.Node, error)
	RecordCanary(ctx context.Context, r queue.CanaryRecord) (int64, *queue.Node, error)
	// RefuseClaim, Attempts, LatestPlacement and CommitPlacements hand a
	// job whose claim was refused back for re-placement, and tell a
	// repeated write from a fenced one.
	RefuseClaim(ctx context.Context, id uuid.UUID, placementVersion int, reason string) (bool, error)
	// AttemptPools keeps a worker of one pool out of another pool's
	// attempts.
	AttemptPools(ctx context.Context, refs []queue.AttemptRef) (map[queue.AttemptRef]string, error)
	Attempts(ctx context.Context, id uuid.UUID) ([]queue.Attempt, error)
	// Checkpoints finds the checkpoint a restore names.
	Checkpoints(ctx context.Context, id uuid.UUID) ([]queue.Checkpoint, error)
	LatestPlacement(ctx context.Context, id uuid.UUID) (*queue.Placement, error)
	CommitPlacements(ctx context.Context, d queue.Decided) ([]queue.PlacedJob, error)
	// SecretValues reads the values of the secrets a job names.
	SecretValues(ctx context.Context, project string, names []string) (map[string]string, error)
	// Result finds the outputs of a job another one reads.
	Result(ctx context.Context, id uuid.UUID) (*queue.ArchiveRecord, error)
}

// WorkerService serves the worker service: workers' claims, leases,
// checkpoint records, completions, hand-backs and canary reports arrive as
// NATS requests on gpuq.svc.worker.<pool>.<op>, and the service does the
// fenced PostgreSQL writes. Every control plane serves it in the queue group
// gpuq-control, so servers share the load and a request to a server that
// dies is answered by none and retried by the worker where that is safe.
// Claims, and completions without outputs, from all workers are batched into
// one statement each: a batch carries what arrived while the previous one
// ran, so that PostgreSQL sees one claim statement and one completion
// statement at a time however many workers there are.
//
// Residency is enforced here, where a worker cannot forge it: the claiming
// pool's country comes from Pools, a claim outside the job's residency is
// refused and the job handed back to Placer for re-placement (counted, with
// the reason, never ended), and every checkpoint and output record must name
// its pool's region inside the job's residency.
type WorkerService struct {
	NATS  *nats.Conn
	Store WorkerStore
	// Pools locates the pool of each request. Required.
	Pools PoolRegistry
	// Placer and JS re-place a job whose claim was refused; without them
	// the job waits in its current placement.
	Placer Placer
	JS     RunPublisher
	// Archives copies a re-placed job's checkpoint from its previous
	// pool's bucket into the claiming pool's; without it such a restore is
	// refused and the job's new pool cannot resume it.
	Archives ArchiveCopier
	// Workdirs copies the working directory of a job that has one into the
	// pool's bucket; without it such a job's workers cannot fetch it.
	Workdirs *Workdirs
	// OutputsReuse is how long a copy of a job's outputs in a pool's
	// bucket, made for a job reading them (spec.inputs), serves the next
	// ones there: each period of this length has a copy of its own. The
	// sweep of unrecorded archives deletes such a copy storage.orphan_age
	// after it was made, so a worker that starts reading it has at least
	// OrphanAge less this to do so. Default 30m, half the default
	// orphan_age.
	OutputsReuse time.Duration
	// Concurrency bounds the requests handled at once. Default 64.
	Concurrency int
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Claims, when set, is told of every attempt the service starts, for
	// the liveness monitor of the same server (Liveness.Claims).
	Claims *RecentClaims
	// Metrics, when set, observes how long each job it starts waited.
	Metrics *Metrics

	outputCopies singleflight.Group

	claims    *batch.Batcher[[]queue.ClaimRequest, []queue.ClaimResult]
	successes *batch.Batcher[queue.PoolAttemptRef, bool]
	slots     chan struct{}
}

// ArchiveCopier reads an archive anywhere and writes one into a bucket.
type ArchiveCopier interface {
	Get(ctx context.Context, uri string, w io.Writer) error
	Put(ctx context.Context, bucket, name string, r io.Reader) (uri string, err error)
	Delete(ctx context.Context, uri string) error
}

// copyArchive copies the archive at src into bucket under name, and
// returns the copy's URI and the SHA-256 (hex) of what was read, for the
// caller to check against what it expects. When src could not be read
// whole, the copy is deleted and the read's error returned.
func copyArchive(ctx context.Context, archives ArchiveCopier, src, bucket, name string) (uri, sum string, err error) {
	pr, pw := io.Pipe()
	h := sha256.New()
	got := make(chan error, 1)
	go func() {
		err := archives.Get(ctx, src, io.MultiWriter(pw, h))
		got <- err
		pw.CloseWithError(err)
	}()
	uri, err = archives.Put(ctx, bucket, name, pr)
	pr.CloseWithError(err)
	if gerr := <-got; gerr != nil {
		if err == nil {
			archives.Delete(ctx, uri) //nolint:errcheck // an orphan costs storage, not correctness
		}
		return "", "", gerr
	}
	if err != nil {
		return "", "", err
	}
	return uri, hex.EncodeToString(h.Sum(nil)), nil
}

// maxClaimStatement bounds the claims of one statement when the claim
// requests of several workers are merged; one request's claims (at most
// queue.MaxWorkerBatch) always go in one statement.
const maxClaimStatement = 1024

// maxWorkerRequest bounds a request's body.
const maxWorkerRequest = 1 << 20

// Start serves the worker service until ctx ends.
func (s *WorkerService) Start(ctx context.Context) (micro.Service, error) {
	if s.NATS == nil || s.Store == nil || s.Pools == nil {
		return nil, errors.New("worker service: nats, store and pools must be set")
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Concurrency <= 0 {
		s.Concurrency = 64
	}
	s.slots = make(chan struct{}, s.Concurrency)
	s.successes = batch.New(s.Store.SucceedInPools)
	s.claims = batch.New(s.claimMerged)
	svc, err := micro.AddService(s.NATS, micro.Config{
		Name: queue.WorkerServiceName, Version: "1.0.0", QueueGroup: queue.ControlQueueGroup,
		Description: "gpuq workers' claims, leases, checkpoint records and completions",
	})
	if err != nil {
		return nil, fmt.Errorf("worker service: %w", err)
	}
	// The serving context outlives a stop so that requests already taken
	// finish their writes and replies.
	serve := context.WithoutCancel(ctx)
	batchCtx, stopBatch := context.WithCancel(serve)
	// One claim batch and one completion batch in flight at a time: every
	// commit waits for the same WAL flush, so a second batch in flight
	// would not get around a slow one; it would only halve both batches,
	// and what a small batch costs PostgreSQL is mostly per statement
	// (parsing, planning, commit), not per row.
	go s.successes.Run(batchCtx)
	go s.claims.Run(batchCtx)
	var inflight taken
	for _, op := range queue.WorkerOps {
		err := svc.AddEndpoint(op, micro.HandlerFunc(func(req micro.Request) {
			inflight.take()
			s.slots <- struct{}{}
			go func() {
				defer inflight.done()
				defer func() { <-s.slots }()
				s.serve(serve, op, req)
			}()
		}), micro.WithEndpointSubject(queue.WorkerServicePrefix+".*."+op))
		if err != nil {
			svc.Stop() //nolint:errcheck // failing anyway
			stopBatch()
			return nil, fmt.Errorf("worker service endpoint %s: %w", op, err)
		}
	}
	go func() {
		<-ctx.Done()
		svc.Stop() //nolint:errcheck // the connection may be closing
		inflight.wait()
		stopBatch()
	}()
	return svc, nil
}

func (s *WorkerService) serve(ctx context.Context, op string, req micro.Request) {
	reply, err := s.handle(ctx, op, req.Subject(), req.Data())
	if err != nil {
		reply = &queue.WorkerReply{Error: queue.EncodeError(err)}
		var bad *badRequest
		if errors.As(err, &bad) {
			reply.Error = &queue.WireError{Kind: queue.WireBadRequest, Message: bad.Error()}
		}
		if reply.Error.Kind == queue.WireInternal {
			s.Logger.Error("worker service", "op", op, "subject", req.Subject(), "err", err)
		}
	}
	if err := req.RespondJSON(reply); err != nil {
		s.Logger.Warn("worker service: replying", "op", op, "err", err)
	}
}

// workerOutcomes are the attempt outcomes a worker may report with each
// operation that ends an attempt: the job ends failed, goes back to its
// pool, or is left as it is.
var workerOutcomes = map[string][]string{
	queue.WorkerOpFail: {queue.OutcomeFailed, queue.OutcomeTimeout, queue.OutcomeOverBudget},
	queue.WorkerOpHandback: {queue.OutcomeRetry, queue.OutcomeTimeout, queue.OutcomePreempted, queue.OutcomeMoved, queue.OutcomeShutdown,
		queue.OutcomeHostError},
	queue.WorkerOpEnd: {queue.OutcomeFenced, queue.OutcomeCancelled},
}

// badRequest is a request the service cannot act on.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error { return &badRequest{msg: fmt.Sprintf(format, args...)} }

// handle checks a request against its subject and does what it asks.
func (s *WorkerService) handle(ctx context.Context, op, subject string, data []byte) (*queue.WorkerReply, error) {
	pool, subOp, ok := queue.WorkerSubjectParts(subject)
	if !ok || subOp != op {
		return nil, badf("subject %q: not a worker service subject", subject)
	}
	if len(data) > maxWorkerRequest {
		return nil, badf("request: %d bytes, over the limit of %d", len(data), maxWorkerRequest)
	}
	var r queue.WorkerRequest
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, badf("request: %v", err)
	}
	if r.Pool != pool {
		return nil, badf("pool: %q is not the subject's pool %q", r.Pool, pool)
	}
	if op != queue.WorkerOpClaim && op != queue.WorkerOpComplete && op != queue.WorkerOpNode && op != queue.WorkerOpCanary {
		if r.JobID == uuid.Nil {
			return nil, badf("job_id: required")
		}
		if op != queue.WorkerOpJob && r.Attempt < 0 {
			return nil, badf("attempt: must not be negative, got %d", r.Attempt)
		}
	}
	if allowed, ok := workerOutcomes[op]; ok && !slices.Contains(allowed, r.Outcome) {
		return nil, badf("outcome: %q is not an outcome of %s; want one of %s", r.Outcome, op, strings.Join(allowed, ", "))
	}
	if err := s.checkAttempts(ctx, op, pool, &r); err != nil {
		return nil, err
	}
	out := &queue.WorkerReply{}
	switch op {
	case queue.WorkerOpClaim:
		return s.claim(ctx, pool, r.Claims)
	case queue.WorkerOpHeartbeat:
		return out, s.Store.Heartbeat(ctx, r.JobID, r.Attempt, r.Lease)
	case queue.WorkerOpNotice:
		return out, s.Store.RecordNotice(ctx, r.JobID, r.Attempt, r.Message, r.Lease)
	case queue.WorkerOpCheckpoint:
		if r.Archive == nil {
			return nil, badf("archive: required")
		}
		if err := s.checkArchive(ctx, pool, r.JobID, "archive", r.Archive); err != nil {
			return nil, err
		}
		seq, err := s.Store.RecordCheckpoint(ctx, r.JobID, r.Attempt, *r.Archive)
		out.Seq = seq
		return out, err
	case queue.WorkerOpRestore:
		cp, err := s.restore(ctx, pool, r.JobID, r.Attempt, r.Seq)
		out.Checkpoint = cp
		return out, err
	case queue.WorkerOpWorkdir:
		c, err := s.workdir(ctx, pool, r.JobID, r.Attempt)
		out.Workdir = c
		return out, err
	case queue.WorkerOpInputs:
		ins, err := s.inputs(ctx, pool, r.JobID, r.Attempt)
		out.Inputs = ins
		return out, err
	case queue.WorkerOpSecrets:
		v, err := s.secrets(ctx, pool, r.JobID, r.Attempt)
		out.Secrets = v
		return out, err
	case queue.WorkerOpComplete:
		recorded, err := s.complete(ctx, pool, r.Completions)
		out.Recorded = recorded
		return out, err
	case queue.WorkerOpFail:
		err := s.Store.Fail(ctx, r.JobID, r.Attempt, r.Outcome, r.ExitCode, r.Message)
		return out, s.repeated(ctx, err, r.JobID, r.Attempt, r.Outcome)
	case queue.WorkerOpHandback:
		err := s.Store.Requeue(ctx, r.JobID, r.Attempt, r.Outcome, r.ExitCode, r.Message)
		return out, s.repeated(ctx, err, r.JobID, r.Attempt, r.Outcome)
	case queue.WorkerOpEnd:
		return out, s.Store.EndAttempt(ctx, r.JobID, r.Attempt, r.Outcome, r.ExitCode)
	case queue.WorkerOpDead:
		err := s.Store.MarkDead(ctx, r.JobID, r.Attempt, r.Message)
		return out, s.repeated(ctx, err, r.JobID, r.Attempt, queue.OutcomePreempted)
	case queue.WorkerOpJob:
		// A worker reads only the jobs its pool has run: a job's spec
		// (its env included) is none of another pool's business, and an
		// unknown and a foreign job look the same.
		attempts, err := s.Store.Attempts(ctx, r.JobID)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(attempts, func(a queue.Attempt) bool { return a.Pool == pool }) {
			return nil, fmt.Errorf("job %s: %w", r.JobID, queue.ErrNotFound)
		}
		j, err := s.Store.Job(ctx, r.JobID)
		out.Job = j
		return out, err
	case queue.WorkerOpNode:
		n, err := s.Store.Node(ctx, r.NodeID)
		out.Node = n
		return out, err
	case queue.WorkerOpCanary:
		if r.Canary == nil {
			return nil, badf("canary: required")
		}
		if r.Canary.Pool != pool {
			return nil, badf("canary.pool: %q is not the subject's pool %q", r.Canary.Pool, pool)
		}
		id, n, err := s.Store.RecordCanary(ctx, *r.Canary)
		out.CanaryRunID, out.Node = id, n
		return out, err
	}
	return nil, badf("op %q: unknown", op)
}

// claim claims a worker's batch of jobs.
func (s *WorkerService) claim(ctx context.Context, pool string, claims []queue.ClaimRequest) (*queue.WorkerReply, error) {
	if len(claims) == 0 || len(claims) > queue.MaxWorkerBatch {
		return nil, badf("claims: must hold 1–%d claims, got %d", queue.MaxWorkerBatch, len(claims))
	}
	for i, c := range claims {
		if c.Pool != pool {
			return nil, badf("claims[%d].pool: %q is not the subject's pool %q", i, c.Pool, pool)
		}
		if c.Lease < time.Second || c.Lease > 24*time.Hour {
			return nil, badf("claims[%d].lease: must be 1s–24h, got %s", i, c.Lease)
		}
		if field, problem := c.CheckClaimant(); field != "" {
			return nil, badf("claims[%d].%s: %s", i, field, problem)
		}
		if err := c.CheckReply(); err != nil {
			// The claim does not depend on it: a worker lost before its
			// next beat has this attempt back on its lease alone.
			s.Logger.Warn("ignoring a claim's reply subject", "field", fmt.Sprintf("claims[%d].reply", i), "pool", pool, "worker", c.WorkerID, "err", err)
			claims[i].Reply = ""
		}
	}
	loc, _, err := s.Pools.PoolLocation(ctx, pool)
	if err != nil {
		return nil, err
	}
	// An unknown pool has no country, so only jobs bound to no residency
	// can be claimed from it.
	for i := range claims {
		claims[i].Country = loc.Country
	}
	results, err := s.claims.Call(ctx, claims)
	if err != nil {
		return nil, err
	}
	out := &queue.WorkerReply{Claims: make([]queue.WireClaimResult, len(results))}
	for i, r := range results {
		out.Claims[i] = queue.WireClaimResult{Claimed: r.Claimed, Error: queue.EncodeError(r.Err)}
		if r.Err == nil && r.Claimed != nil {
			s.Claims.Started(pool, claims[i].WorkerID, queue.HeldAttempt{JobID: claims[i].JobID, Attempt: r.Claimed.Job.Attempt, Reply: claims[i].Reply})
			s.Metrics.JobStarted(pool, r.Claimed.Job.Attempt, r.Claimed.Job.SubmittedAt)
		}
		var refused *queue.ClaimRefusedError
		if errors.As(r.Err, &refused) {
			s.Logger.Warn("claim refused: outside the job's residency", "job", claims[i].JobID, "pool", pool, "worker", claims[i].WorkerID, "reason", refused.Reason)
			if err := s.handBack(ctx, claims[i], refused.Reason); err != nil {
				// The claim stays refused; the reconciler republishes
				// the job's current placement if its message is gone.
				s.Logger.Error("re-placing a job whose claim was refused", "job", claims[i].JobID, "err", err)
			}
		}
	}
	return out, nil
}

// claimMerged claims what several claim requests ask for, in as few
// statements as maxClaimStatement allows, and returns each request's results.
// When a statement shared by several requests fails, each of them is tried
// again in a statement of its own (the failed one changed nothing), so that
// what fails one request's claims does not fail the others'.
func (s *WorkerService) claimMerged(ctx context.Context, requests [][]queue.ClaimRequest) ([][]queue.ClaimResult, error) {
	out := make([][]queue.ClaimResult, len(requests))
	for first := 0; first < len(requests); {
		end, n := first+1, len(requests[first])
		for end < len(requests) && n+len(requests[end]) <= maxClaimStatement {
			n += len(requests[end])
			end++
		}
		merged := requests[first]
		if end > first+1 {
			merged = make([]queue.ClaimRequest, 0, n)
			for _, r := range requests[first:end] {
				merged = append(merged, r...)
			}
		}
		results, err := s.Store.ClaimMany(ctx, merged)
		if err != nil && end == first+1 {
			return nil, err
		}
		if err != nil {
			s.Logger.Warn("a claim statement shared by several workers failed; claiming each worker's request alone", "requests", end-first, "err", err)
			for i := first; i < end; i++ {
				out[i], err = s.Store.ClaimMany(ctx, requests[i])
				if err != nil {
					s.Logger.Error("worker service: claiming a worker's request", "worker", requests[i][0].WorkerID, "claims", len(requests[i]), "err", err)
					out[i] = failedClaims(len(requests[i]), err)
				}
			}
			first = end
			continue
		}
		for i := first; i < end; i++ {
			k := len(requests[i])
			out[i], results = results[:k:k], results[k:]
		}
		first = end
	}
	return out, nil
}

// failedClaims is the results of a request whose claim statement failed:
// each claim carries the statement's error.
func failedClaims(n int, err error) []queue.ClaimResult {
	out := make([]queue.ClaimResult, n)
	for i := range out {
		out[i].Err = err
	}
	return out
}

// handBack counts a refused claim and re-places the job inside its
// residency under a new placement version, so that it runs where it may.
func (s *WorkerService) handBack(ctx context.Context, c queue.ClaimRequest, reason string) error {
	refused, err := s.Store.RefuseClaim(ctx, c.JobID, c.PlacementVersion, reason)
	if err != nil || !refused || s.Placer == nil || s.JS == nil {
		return err
	}
	job, err := s.Store.Job(ctx, c.JobID)
	if err != nil {
		return err
	}
	current, err := s.Store.LatestPlacement(ctx, job.ID)
	if err != nil {
		return err
	}
	attempts, err := s.Store.Attempts(ctx, job.ID)
	if err != nil {
		return err
	}
	next, err := s.Placer.Place(ctx, job, &Prior{Placement: *current, Attempts: attempts})
	var rej *queue.RejectionError
	if errors.As(err, &rej) {
		s.Logger.Info("no other placement for a job whose claim was refused; it stays placed", "job", job.ID, "pool", current.Pool, "reason", rej.Reason)
		return nil
	}
	if err != nil {
		return err
	}
	next.Version = job.PlacementVersion + 1
	done, err := s.Store.CommitPlacements(ctx, queue.Decided{Placed: []queue.PlacedJob{{JobID: job.ID, Placement: next}}})
	if err != nil || len(done) == 0 {
		return err
	}
	s.Logger.Info("re-placed a job whose claim was refused", "job", job.ID, "refused_pool", c.Pool, "to", next.Pool, "placement", next.Version)
	return publishOrders(ctx, s.JS, []queue.RunOrder{orderFor(job.ID, next)}, "")
}

// checkAttempts refuses a write into an attempt that a worker of another
// pool claimed: a worker credential is scoped to its pool, and so are the
// attempts it may write to. An attempt that does not exist is left to the
// write's own fencing.
func (s *WorkerService) checkAttempts(ctx context.Context, op, pool string, r *queue.WorkerRequest) error {
	switch op {
	case queue.WorkerOpClaim, queue.WorkerOpJob, queue.WorkerOpNode, queue.WorkerOpCanary:
		return nil
	case queue.WorkerOpComplete:
		// complete checks as it records: most completions need no
		// statement of their own for it.
		return nil
	}
	return s.checkPools(ctx, pool, []queue.AttemptRef{{JobID: r.JobID, Attempt: r.Attempt}})
}

// checkPools refuses refs when an attempt among them was claimed by a
// worker of another pool than pool.
func (s *WorkerService) checkPools(ctx context.Context, pool string, refs []queue.AttemptRef) error {
	if len(refs) == 0 {
		return nil
	}
	pools, err := s.Store.AttemptPools(ctx, refs)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if p, ok := pools[ref]; ok && p != pool {
			return badf("attempt: attempt %d of job %s was claimed by pool %s, not %s", ref.Attempt, ref.JobID, p, pool)
		}
	}
	return nil
}

// restore returns checkpoint seq of job in pool's own bucket, where the
// pool's workers may read it. A checkpoint another pool stored (the job was
// re-placed) is copied into pool's bucket, checked against its recorded
// sha256, and recorded under attempt like a checkpoint the attempt saved:
// fenced, and only inside the job's residency (checkArchive). Repeating a
// restore copies again under the same name and finds the same record.
func (s *WorkerService) restore(ctx context.Context, pool string, id uuid.UUID, attempt, seq int) (*queue.Checkpoint, error) {
	if seq < 1 {
		return nil, badf("seq: must be positive, got %d", seq)
	}
	// Only for the attempt this pool runs now: the copy lands where every
	// worker of the pool may read it, so it is made for no other.
	if err := s.checkRunning(ctx, pool, id, attempt); err != nil {
		return nil, fmt.Errorf("restoring checkpoint %d: %w", seq, err)
	}
	cps, err := s.Store.Checkpoints(ctx, id)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(cps, func(c queue.Checkpoint) bool { return c.Seq == seq })
	if i < 0 {
		return nil, fmt.Errorf("checkpoint %d of job %s: %w", seq, id, queue.ErrNotFound)
	}
	from := cps[i]
	if strings.HasPrefix(from.StoreURI, queue.JobArchivePrefix(pool, id)) {
		return &from, nil
	}
	if s.Archives == nil {
		return nil, fmt.Errorf("checkpoint %d of job %s lies in another pool's bucket and this control plane copies no archives", seq, id)
	}
	loc, ok, err := s.Pools.PoolLocation(ctx, pool)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, badf("pool: %s is not in the control plane's pool registry", pool)
	}
	name := fmt.Sprintf("jobs/%s/checkpoint-a%d-restore-s%d.tar.zst", id, attempt, seq)
	rec := queue.ArchiveRecord{Bytes: from.Bytes, SHA256: from.SHA256, Region: loc.Region,
		StoreURI: queue.ArchiveScheme + queue.ArchiveBucket(pool) + "/" + name}
	// Residency first: nothing is copied into a region outside the job's
	// residency. A stale attempt's copy is fenced at the record, and
	// deleted.
	if err := s.checkArchive(ctx, pool, id, "checkpoint", &rec); err != nil {
		return nil, err
	}
	uri, sum, err := copyArchive(ctx, s.Archives, from.StoreURI, queue.ArchiveBucket(pool), name)
	if errors.Is(err, queue.ErrArchiveLost) {
		return nil, fmt.Errorf("checkpoint %d of job %s: %w", seq, id, err)
	}
	if err != nil {
		return nil, fmt.Errorf("copying checkpoint %d of job %s into pool %s's bucket: %w", seq, id, pool, err)
	}
	if sum != from.SHA256 {
		s.Archives.Delete(ctx, uri) //nolint:errcheck // an orphan costs storage, not correctness
		return nil, fmt.Errorf("checkpoint %d of job %s: %w: %s holds sha256 %s, recorded %s", seq, id, queue.ErrArchiveLost, from.StoreURI, sum, from.SHA256)
	}
	rec.StoreURI = uri
	newSeq, err := s.Store.RecordCheckpoint(ctx, id, attempt, rec)
	if err != nil {
		if queue.RecordRefused(err) {
			s.Archives.Delete(ctx, uri) //nolint:errcheck // an orphan costs storage, not correctness
		}
		return nil, err
	}
	s.Logger.Info("checkpoint copied for a re-placed job", "job", id, "attempt", attempt, "from", from.StoreURI, "to", uri, "seq", newSeq)
	return &queue.Checkpoint{JobID: id, Seq: newSeq, Attempt: attempt, Bytes: rec.Bytes, SHA256: rec.SHA256,
		Region: rec.Region, StoreURI: uri, CreatedAt: time.Now()}, nil
}

// checkRunning refuses, as fenced, an attempt that is not job id's latest,
// still running, on pool.
func (s *WorkerService) checkRunning(ctx context.Context, pool string, id uuid.UUID, attempt int) error {
	attempts, err := s.Store.Attempts(ctx, id)
	if err != nil {
		return err
	}
	if i := slices.IndexFunc(attempts, func(a queue.Attempt) bool { return a.Attempt == attempt }); i < 0 ||
		attempts[i].Pool != pool || attempts[i].EndedAt != nil || slices.ContainsFunc(attempts, func(a queue.Attempt) bool { return a.Attempt > attempt }) {
		return fmt.Errorf("job %s, attempt %d of pool %s: %w", id, attempt, pool, queue.ErrFenced)
	}
	return nil
}

// workdir returns the copy, in pool's bucket, of the working directory
// (spec.workdir) of the attempt pool runs now.
func (s *WorkerService) workdir(ctx context.Context, pool string, id uuid.UUID, attempt int) (*queue.WorkdirCopy, error) {
	if err := s.checkRunning(ctx, pool, id, attempt); err != nil {
		return nil, fmt.Errorf("fetching the working directory: %w", err)
	}
	j, err := s.Store.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	sum, ok := queue.WorkdirDigest(j.Spec.Workdir)
	if !ok {
		return nil, badf("job_id: job %s has no working directory", id)
	}
	if s.Workdirs == nil {
		return nil, errors.New("this control plane keeps no working directories")
	}
	return s.Workdirs.CopyToPool(ctx, pool, j.Spec.Project, sum)
}

// inputs returns the outputs of the jobs the attempt pool runs now reads
// (spec.inputs' job entries), each in pool's bucket: where the job that
// left them ran on pool, as it left them; else a copy, made once for every
// job of the pool reading them within OutputsReuse (a sweep's runs reading
// its data step), which the sweep of unrecorded archives deletes once it
// is older than storage.orphan_age. Outputs bound to a residency are
// copied only into a pool inside it, whatever placed the job.
func (s *WorkerService) inputs(ctx context.Context, pool string, id uuid.UUID, attempt int) ([]queue.InputCopy, error) {
	if err := s.checkRunning(ctx, pool, id, attempt); err != nil {
		return nil, fmt.Errorf("fetching the job's inputs: %w", err)
	}
	j, err := s.Store.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	ins := j.Spec.InputJobs()
	if len(ins) == 0 {
		return nil, badf("job_id: job %s reads no job's outputs", id)
	}
	loc, ok, err := s.Pools.PoolLocation(ctx, pool)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, badf("pool: %s is not in the control plane's pool registry", pool)
	}
	out := make([]queue.InputCopy, 0, len(ins))
	for _, in := range ins {
		from, err := uuid.Parse(in.Job)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", in.Name, err)
		}
		src, err := s.Store.Job(ctx, from)
		if err != nil {
			return nil, fmt.Errorf("input %s (job %s): %w", in.Name, from, err)
		}
		if src.Project != j.Project {
			return nil, fmt.Errorf("input %s: job %s is not a job of project %s: %w", in.Name, from, j.Project, queue.ErrNotFound)
		}
		c := queue.InputCopy{Name: in.Name, JobID: from, State: src.State}
		rec, err := s.Store.Result(ctx, from)
		if src.State != queue.StateSucceeded || errors.Is(err, queue.ErrNotFound) {
			out = append(out, c)
			continue
		}
		if err != nil {
			return nil, err
		}
		p, err := s.Store.LatestPlacement(ctx, from)
		if err != nil && !errors.Is(err, queue.ErrNotFound) {
			return nil, err
		}
		if p != nil && len(p.Countries) > 0 && !slices.Contains(p.Countries, loc.Country) {
			return nil, fmt.Errorf("input %s: %w: the outputs of job %s are bound to residency %s, and pool %s lies in %s (%s)",
				in.Name, queue.ErrInputRefused, from, p.Residency, pool, loc.Region, loc.Country)
		}
		uri, err := s.outputsInPool(ctx, pool, from, rec)
		if err != nil {
			return nil, fmt.Errorf("input %s, the outputs of job %s: %w", in.Name, from, err)
		}
		c.StoreURI, c.SHA256, c.Bytes = uri, rec.SHA256, rec.Bytes
		out = append(out, c)
	}
	return out, nil
}

// outputsInPool returns where the outputs rec of job from lie in pool's
// bucket: where they were recorded, when that is pool's bucket; else the
// copy of this period of OutputsReuse, made when there is none yet.
func (s *WorkerService) outputsInPool(ctx context.Context, pool string, from uuid.UUID, rec *queue.ArchiveRecord) (string, error) {
	bucket := queue.ArchiveBucket(pool)
	if strings.HasPrefix(rec.StoreURI, queue.ArchiveScheme+bucket+"/") {
		return rec.StoreURI, nil
	}
	if s.Archives == nil {
		return "", errors.New("this control plane copies no archives, so it cannot hand a job another job's outputs")
	}
	store, ok := s.Archives.(interface {
		Stat(ctx context.Context, uri string) (queue.ObjectStat, error)
	})
	// Each period of OutputsReuse has a copy of its own, so that a copy
	// is never written over while a worker reads it.
	reuse := cmp.Or(s.OutputsReuse, 30*time.Minute)
	name := fmt.Sprintf("jobs/%s/outputs-copy-%s-%d.tar.zst", from, rec.SHA256, time.Now().UnixNano()/int64(reuse))
	dst := queue.ArchiveScheme + bucket + "/" + name
	if ok {
		if st, err := store.Stat(ctx, dst); err == nil && st.SHA256 == rec.SHA256 {
			return dst, nil
		}
	}
	// The runs of a sweep starting at once on one pool make one copy.
	v, err, _ := s.outputCopies.Do(dst, func() (any, error) {
		uri, sum, err := copyArchive(ctx, s.Archives, rec.StoreURI, bucket, name)
		if err != nil {
			if errors.Is(err, queue.ErrArchiveLost) {
				return nil, err
			}
			return nil, fmt.Errorf("copying them into pool %s's bucket: %w", pool, err)
		}
		if sum != rec.SHA256 {
			s.Archives.Delete(ctx, uri) //nolint:errcheck // the sweep removes what is left
			return nil, fmt.Errorf("%w: %s holds sha256 %s, recorded %s", queue.ErrArchiveLost, rec.StoreURI, sum, rec.SHA256)
		}
		return uri, nil
	})
	if err != nil {
		return "", err
	}
	return v.(string), nil
}

// secrets returns the values of the secrets (spec.secrets) of the attempt
// pool runs now: read from the job's project, named by the job's spec as
// PostgreSQL holds it, so a worker can neither ask for another job's nor
// name others.
func (s *WorkerService) secrets(ctx context.Context, pool string, id uuid.UUID, attempt int) (map[string]string, error) {
	if err := s.checkRunning(ctx, pool, id, attempt); err != nil {
		return nil, fmt.Errorf("fetching the job's secrets: %w", err)
	}
	j, err := s.Store.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(j.Spec.Secrets) == 0 {
		return nil, badf("job_id: job %s names no secrets", id)
	}
	return s.Store.SecretValues(ctx, j.Spec.Project, j.Spec.Secrets)
}

// checkArchive refuses a checkpoint or output record that does not name the
// region of the worker's pool, or whose pool lies outside the job's
// residency.
func (s *WorkerService) checkArchive(ctx context.Context, pool string, id uuid.UUID, field string, a *queue.ArchiveRecord) error {
	loc, ok, err := s.Pools.PoolLocation(ctx, pool)
	if err != nil {
		return err
	}
	if !ok {
		return badf("%s.region: pool %s is not in the control plane's pool registry", field, pool)
	}
	if a.Region != loc.Region {
		return badf("%s.region: %q is not pool %s's region %q", field, a.Region, pool, loc.Region)
	}
	// Only an object of this job in the pool's bucket: the client service
	// serves what is recorded with the control plane's credential, so a
	// record naming another job's or region's object would hand it out.
	if prefix := queue.JobArchivePrefix(pool, id); !strings.HasPrefix(a.StoreURI, prefix) || len(a.StoreURI) == len(prefix) {
		return badf("%s.store_uri: must name an object of job %s in pool %s's bucket (%s…)", field, id, pool, prefix)
	}
	p, err := s.Store.LatestPlacement(ctx, id)
	if errors.Is(err, queue.ErrNotFound) {
		return nil // unplaced jobs are bound to no residency the store knows
	}
	if err != nil {
		return err
	}
	if len(p.Countries) > 0 && !slices.Contains(p.Countries, loc.Country) {
		return badf("%s.region: region %s (country %s) lies outside residency %s", field, loc.Region, loc.Country, p.Residency)
	}
	return nil
}

// repeated tells a write that was fenced out from one repeated after its
// reply was lost: the attempt already ended with the outcome asked for.
func (s *WorkerService) repeated(ctx context.Context, err error, id uuid.UUID, attempt int, outcome string) error {
	if !errors.Is(err, queue.ErrFenced) {
		return err
	}
	attempts, aerr := s.Store.Attempts(ctx, id)
	if aerr != nil {
		return err
	}
	for _, a := range attempts {
		if a.Attempt == attempt && a.EndedAt != nil && a.Outcome == outcome {
			return nil
		}
	}
	return err
}

// complete records a batch of completions: those without outputs join the
// service-wide batch, those with outputs are recorded one by one.
func (s *WorkerService) complete(ctx context.Context, pool string, cs []queue.Completion) ([]bool, error) {
	if len(cs) == 0 || len(cs) > queue.MaxWorkerBatch {
		return nil, badf("completions: must hold 1–%d completions, got %d", queue.MaxWorkerBatch, len(cs))
	}
	var withOutputs []queue.AttemptRef
	for i, c := range cs {
		if c.Outputs != nil {
			if err := s.checkArchive(ctx, pool, c.JobID, fmt.Sprintf("completions[%d].outputs", i), c.Outputs); err != nil {
				return nil, err
			}
			withOutputs = append(withOutputs, queue.AttemptRef{JobID: c.JobID, Attempt: c.Attempt})
		}
	}
	// A completion without outputs is recorded only for an attempt of
	// pool (SucceedInPools); one with outputs is checked first.
	if err := s.checkPools(ctx, pool, withOutputs); err != nil {
		return nil, err
	}
	recorded := make([]bool, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.Outputs == nil {
				ref := queue.PoolAttemptRef{AttemptRef: queue.AttemptRef{JobID: c.JobID, Attempt: c.Attempt}, Pool: pool}
				recorded[i], errs[i] = s.successes.Call(ctx, ref)
				return
			}
			err := s.Store.Succeed(ctx, c.JobID, c.Attempt, c.Outputs)
			if errors.Is(err, queue.ErrFenced) {
				return
			}
			recorded[i], errs[i] = err == nil, err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// What was not recorded is another pool's attempt (refused), a fenced
	// attempt, or a completion repeated after its reply was lost, which
	// finds the job already succeeded under its own attempt: that is its
	// answer, not a fence.
	var unrecorded []queue.AttemptRef
	for i, c := range cs {
		if !recorded[i] {
			unrecorded = append(unrecorded, queue.AttemptRef{JobID: c.JobID, Attempt: c.Attempt})
		}
	}
	if err := s.checkPools(ctx, pool, unrecorded); err != nil {
		return nil, err
	}
	for i, c := range cs {
		if recorded[i] {
			continue
		}
		if j, err := s.Store.Job(ctx, c.JobID); err == nil && j.State == queue.StateSucceeded && j.Attempt == c.Attempt {
			recorded[i] = true
		}
	}
	return recorded, nil
}
