-- name: JobInsert :execrows
-- JobInsert records a new job; it inserts nothing when the id or the
-- project's idempotency key already exists, so a redelivered submission is
-- harmless.
INSERT INTO jobs (id, project, name, idempotency_key, spec, state)
VALUES (@id, @project, @name, sqlc.narg('idempotency_key'), @spec, 'pending')
ON CONFLICT DO NOTHING;

-- name: JobGetByID :one
SELECT * FROM jobs WHERE id = @id;

-- name: JobGetByIdempotencyKey :one
SELECT * FROM jobs WHERE project = @project AND idempotency_key = @idempotency_key;

-- name: JobSetPlaced :execrows
-- JobSetPlaced moves a waiting job to its next placement; it changes nothing
-- when the job is running or finished, or was placed again meanwhile.
UPDATE jobs
SET state = 'placed', placement_version = @placement_version, pool = @pool, updated_at = now()
WHERE id = @id AND state IN ('pending', 'placed') AND placement_version = @placement_version - 1;

-- name: JobReject :execrows
UPDATE jobs
SET state = 'rejected', reason = @reason, updated_at = now(), finalized_at = now()
WHERE id = @id AND state = 'pending';

-- name: JobClaim :one
-- JobClaim starts a new attempt. It succeeds only for the placement the
-- message was published under, and only when no other attempt holds a live
-- lease: a running job whose lease expired was lost by its worker.
UPDATE jobs
SET attempt = attempt + 1,
    state = 'running',
    preemptions = preemptions + CASE WHEN state = 'running' THEN 1 ELSE 0 END,
    lease_expires_at = now() + make_interval(secs => @lease_seconds::float8),
    updated_at = now()
WHERE id = @id
  AND placement_version = @placement_version
  AND (state = 'placed' OR (state = 'running' AND lease_expires_at < now()))
RETURNING *;

-- name: JobLeaseRemaining :one
-- JobLeaseRemaining tells a worker that could not claim a job why: its state
-- and, when another attempt runs it, how long that attempt's lease lasts.
SELECT state, placement_version,
       GREATEST(EXTRACT(EPOCH FROM (lease_expires_at - now())), 0)::float8 AS lease_seconds
FROM jobs WHERE id = @id;

-- name: JobHeartbeat :execrows
WITH j AS (
    UPDATE jobs
    SET lease_expires_at = now() + make_interval(secs => @lease_seconds::float8)
    WHERE id = @id AND attempt = @attempt AND state = 'running'
    RETURNING id
)
UPDATE attempts SET heartbeat_at = now()
WHERE job_id IN (SELECT id FROM j) AND attempts.attempt = @attempt;

-- name: JobSucceed :execrows
UPDATE jobs
SET state = 'succeeded', exit_code = 0, reason = '', lease_expires_at = NULL, updated_at = now(), finalized_at = now()
WHERE id = @id AND attempt = @attempt AND state = 'running';

-- name: JobFail :execrows
UPDATE jobs
SET state = 'failed', errors = errors + 1, exit_code = sqlc.narg('exit_code'), reason = @reason,
    lease_expires_at = NULL, updated_at = now(), finalized_at = now()
WHERE id = @id AND attempt = @attempt AND state = 'running';

-- name: JobRequeue :execrows
-- JobRequeue hands a running job back to its pool after an error or a
-- preemption notice; the worker naks the message right after.
UPDATE jobs
SET state = 'placed',
    errors = errors + @add_errors,
    preemptions = preemptions + @add_preemptions,
    exit_code = sqlc.narg('exit_code'),
    reason = @reason,
    lease_expires_at = NULL,
    updated_at = now()
WHERE id = @id AND attempt = @attempt AND state = 'running';

-- name: JobCancel :one
UPDATE jobs
SET state = 'cancelled', reason = @reason, lease_expires_at = NULL, updated_at = now(), finalized_at = now()
WHERE id = @id AND state IN ('pending', 'placed', 'running')
RETURNING attempt;

-- name: JobMarkDead :execrows
UPDATE jobs
SET state = 'dead', reason = @reason, lease_expires_at = NULL, updated_at = now(), finalized_at = now()
WHERE id = @id AND state IN ('pending', 'placed', 'running');

-- name: JobList :many
SELECT * FROM jobs
WHERE (sqlc.narg('state')::job_state IS NULL OR state = sqlc.narg('state')::job_state)
  AND (sqlc.narg('project')::text IS NULL OR project = sqlc.narg('project')::text)
ORDER BY submitted_at DESC, id
LIMIT @max_rows;

-- name: JobListUnsettled :many
-- JobListUnsettled finds the jobs the reconciler must look at: recorded but
-- never placed, or placed or running and quiet for longer than the cutoff.
SELECT id, state, pool, placement_version, lease_expires_at FROM jobs
WHERE (state = 'pending' AND updated_at < now() - make_interval(secs => @pending_seconds::float8))
   OR (state = 'placed' AND updated_at < now() - make_interval(secs => @placed_seconds::float8))
   OR (state = 'running' AND lease_expires_at < now() - make_interval(secs => @placed_seconds::float8))
ORDER BY updated_at
LIMIT @max_rows;

-- name: JobCountByState :many
SELECT state, count(*) AS jobs FROM jobs GROUP BY state ORDER BY state;
