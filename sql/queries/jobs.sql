-- name: JobInsertMany :many
-- JobInsertMany records a batch of new jobs and their "submitted" events in
-- one statement and returns the rows it inserted; a job whose id or project
-- idempotency key already exists inserts nothing, so a redelivered submission
-- is harmless. An empty idempotency key means none.
WITH ins AS (
    INSERT INTO jobs (id, project, name, idempotency_key, spec, state)
    SELECT u.id, u.project, u.name, NULLIF(u.idempotency_key, ''), u.spec::jsonb, 'pending'
    FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@projects::text[]) AS project, unnest(@names::text[]) AS name,
                 unnest(@idempotency_keys::text[]) AS idempotency_key, unnest(@specs::text[]) AS spec) AS u
    ON CONFLICT DO NOTHING
    RETURNING jobs.*
), ev AS (
    INSERT INTO job_events (job_id, state, attempt, message)
    SELECT ins.id, 'pending', 0, 'submitted' FROM ins
)
SELECT ins.* FROM ins;

-- name: JobInsertPlacedMany :many
-- JobInsertPlacedMany records a batch of new jobs whose first placement is
-- decided (its budget guards re-checked in the same transaction): each job
-- is inserted already placed, with its placement (as JobPlaceMany records
-- one, at version 1), its replay recipe (snapshot '' means none) and its
-- "submitted" and "placed" events, in one statement that writes each job
-- row once; it returns the rows it inserted. A job whose id or project
-- idempotency key already exists inserts nothing, so a redelivered
-- submission is harmless. An empty idempotency key means none.
WITH u AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@projects::text[]) AS project, unnest(@names::text[]) AS name,
           unnest(@idempotency_keys::text[]) AS idempotency_key, unnest(@specs::text[]) AS spec,
           unnest(@pools::text[]) AS pool, unnest(@regions::text[]) AS region,
           unnest(@residencies::text[]) AS residency, unnest(@countries::text[]) AS countries,
           unnest(@price_micros::bigint[]) AS price_micros, unnest(@currencies::text[]) AS currency,
           unnest(@decisions::text[]) AS decision, unnest(@estimate_micros::bigint[]) AS estimate_micros,
           unnest(@estimate_currencies::text[]) AS estimate_currency, unnest(@providers::text[]) AS provider,
           unnest(@snapshots::text[]) AS snapshot, unnest(@recipes::text[]) AS recipe
), ins AS (
    INSERT INTO jobs (id, project, name, idempotency_key, spec, state, placement_version, pool)
    SELECT u.id, u.project, u.name, NULLIF(u.idempotency_key, ''), u.spec::jsonb, 'placed', 1, u.pool
    FROM u
    ON CONFLICT DO NOTHING
    RETURNING jobs.*
), p AS (
    INSERT INTO placements (job_id, version, pool, region, residency, countries, price_micros, currency, decision,
                            estimate_micros, estimate_currency, provider)
    SELECT u.id, 1, u.pool, u.region, u.residency,
           COALESCE(string_to_array(NULLIF(u.countries, ''), ','), '{}'), u.price_micros, u.currency, u.decision::jsonb,
           u.estimate_micros, u.estimate_currency, u.provider
    FROM u JOIN ins ON ins.id = u.id
), r AS (
    INSERT INTO placement_recipes (job_id, version, snapshot, recipe)
    SELECT u.id, 1, u.snapshot, u.recipe::jsonb
    FROM u JOIN ins ON ins.id = u.id
    WHERE u.snapshot <> ''
), ev AS (
    INSERT INTO job_events (job_id, state, attempt, message)
    SELECT e.job_id, e.state, 0, e.message
    FROM (
        SELECT ins.id AS job_id, 'pending'::job_state AS state, 'submitted' AS message, 0 AS step FROM ins
        UNION ALL
        SELECT ins.id, 'placed'::job_state, 'placed on pool ' || ins.pool, 1 FROM ins
    ) e
    ORDER BY e.job_id, e.step
)
SELECT ins.* FROM ins;

-- name: JobListByIDs :many
SELECT * FROM jobs WHERE id = ANY(@ids::uuid[]);

-- name: JobGetByID :one
SELECT * FROM jobs WHERE id = @id;

-- name: JobGetByIdempotencyKey :one
SELECT * FROM jobs WHERE project = @project AND idempotency_key = @idempotency_key;

-- name: JobPlaceMany :many
-- JobPlaceMany moves a batch of waiting jobs to their next placement, records
-- the placements (with the chosen price, which the attempts under them
-- accrue) and the "placed" events (numbered with the job's latest attempt,
-- as the event that handed it back is), in one statement; it returns the jobs
-- it placed and their attempts. A job that is running or finished, or was placed again meanwhile,
-- is left alone and gets no placement row (nor replay recipe: snapshot ''
-- means none; its offer snapshot is stored first). countries holds each placement's
-- country codes joined by commas. estimate_micros (in estimate_currencies)
-- is the placement's estimated cost, which the job reserves against its
-- project's budgets until it finishes.
WITH u AS (
    SELECT unnest(@job_ids::uuid[]) AS job_id, unnest(@versions::int[]) AS version, unnest(@pools::text[]) AS pool,
           unnest(@regions::text[]) AS region, unnest(@residencies::text[]) AS residency,
           unnest(@countries::text[]) AS countries, unnest(@price_micros::bigint[]) AS price_micros,
           unnest(@currencies::text[]) AS currency, unnest(@decisions::text[]) AS decision,
           unnest(@estimate_micros::bigint[]) AS estimate_micros, unnest(@estimate_currencies::text[]) AS estimate_currency,
           unnest(@providers::text[]) AS provider, unnest(@snapshots::text[]) AS snapshot,
           unnest(@recipes::text[]) AS recipe
    ORDER BY 1
), l AS (
    -- Each job is looked up by its id alone (see JobClaimMany).
    SELECT cur.id, u.version, u.pool FROM u
    CROSS JOIN LATERAL (SELECT jobs.id, jobs.state, jobs.placement_version FROM jobs WHERE jobs.id = u.job_id LIMIT 1 FOR UPDATE) cur
    WHERE cur.state IN ('pending', 'placed') AND cur.placement_version = u.version - 1
), j AS (
    UPDATE jobs
    SET state = 'placed', placement_version = l.version, pool = l.pool, updated_at = now()
    FROM l
    WHERE jobs.id = l.id
    RETURNING jobs.id, jobs.pool, jobs.placement_version, jobs.attempt
), p AS (
    INSERT INTO placements (job_id, version, pool, region, residency, countries, price_micros, currency, decision,
                            estimate_micros, estimate_currency, provider)
    SELECT u.job_id, u.version, u.pool, u.region, u.residency,
           COALESCE(string_to_array(NULLIF(u.countries, ''), ','), '{}'), u.price_micros, u.currency, u.decision::jsonb,
           u.estimate_micros, u.estimate_currency, u.provider
    FROM u JOIN j ON j.id = u.job_id
    ON CONFLICT (job_id, version) DO NOTHING
), r AS (
    INSERT INTO placement_recipes (job_id, version, snapshot, recipe)
    SELECT u.job_id, u.version, u.snapshot, u.recipe::jsonb
    FROM u JOIN j ON j.id = u.job_id
    WHERE u.snapshot <> ''
    ON CONFLICT (job_id, version) DO NOTHING
)
INSERT INTO job_events (job_id, state, attempt, message)
SELECT j.id, 'placed', j.attempt,
       CASE WHEN j.placement_version > 1 THEN 're-placed on pool ' || j.pool || ' (placement ' || j.placement_version || ')'
            ELSE 'placed on pool ' || j.pool END
FROM j
RETURNING job_id, attempt;

-- name: JobReject :execrows
UPDATE jobs
SET state = 'rejected', reason = @reason, updated_at = now(), finalized_at = now()
WHERE id = @id AND state::text = 'pending'; -- by id alone (see JobClaimMany)

-- name: JobClaimMany :many
-- JobClaimMany starts a new attempt of each job of a batch, in one statement,
-- each for the claimant that claims it: a batch may hold the claims of
-- several workers, and each claim names its claimant by its position (from
-- 1) in the claimant arrays (worker, host, pid, pool, node, canary run or 0,
-- the pool's country, lease and "running" message). It closes the attempts
-- each claim supersedes as lost, records the new attempts and their
-- "running" events, and returns the jobs it claimed, their reason cleared
-- (a hand-back's reason says why a job waits, not why it runs; the trail
-- and the attempts keep it). A job is claimed only
-- for the placement its message was published under, only when no other
-- attempt holds a live lease (a running job whose lease expired was lost by
-- its worker), and only when the claiming pool's country (from the control
-- plane's pool registry) lies in the placement's residency, and only by a
-- worker of the placement's pool.
-- The row locks taken by the first CTE make a concurrent claim of the same
-- job find it running and claim nothing. The ids must be distinct. Each
-- attempt keeps the id of the claim request that started it.
--
-- Each job is looked up by its id alone and its state checked after (here
-- and in every statement that writes a batch of jobs): a batch then costs
-- its own size whatever the table holds. Left to choose, the planner may
-- scan jobs_state_updated for every placed or running job instead, which
-- visits every queued job and every index entry the queue's churn has left
-- since the last vacuum, for each batch. (LIMIT 1 keeps the planner from
-- moving the state checks into the lookup.) The jobs are locked in id order,
-- so that concurrent batches lock job rows in one order. Statements that
-- write one job compare state::text, which no index serves, for the same
-- reason.
WITH u AS (
    SELECT w.id, w.placement_version, w.claim_id, w.claimant,
           (@worker_ids::text[])[w.claimant] AS worker_id, (@hosts::text[])[w.claimant] AS host,
           (@pids::int[])[w.claimant] AS pid, (@pools::text[])[w.claimant] AS pool,
           (@node_ids::text[])[w.claimant] AS node_id, (@canary_run_ids::bigint[])[w.claimant] AS canary_run_id,
           (@countries::text[])[w.claimant] AS country, (@lease_seconds::float8[])[w.claimant] AS lease_seconds,
           (@messages::text[])[w.claimant] AS message
    FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@placement_versions::int[]) AS placement_version,
                 unnest(@claim_ids::uuid[]) AS claim_id, unnest(@claimants::int[]) AS claimant) w
    ORDER BY 1
), c AS (
    -- Each attempt runs at the price of the placement it is claimed under.
    -- The placement is joined on u.id, equal to j.id: joined on j.id, the
    -- generic plan looked placements up by version alone, reading every
    -- placement of that version for each claim.
    SELECT j.id, j.attempt + 1 AS attempt, u.claim_id, u.worker_id, u.host, u.pid, u.pool, u.node_id,
           NULLIF(u.canary_run_id, 0) AS canary_run_id, u.lease_seconds, u.message,
           COALESCE(pl.price_micros, 0) AS price_micros, COALESCE(pl.currency, '') AS currency
    FROM u
    CROSS JOIN LATERAL (SELECT jobs.id, jobs.attempt, jobs.state, jobs.placement_version, jobs.lease_expires_at
                        FROM jobs WHERE jobs.id = u.id LIMIT 1 FOR UPDATE) j
    LEFT JOIN placements pl ON pl.job_id = u.id AND pl.version = u.placement_version
    WHERE j.placement_version = u.placement_version
      AND (j.state = 'placed' OR (j.state = 'running' AND j.lease_expires_at < now()))
      AND (pl.countries IS NULL OR cardinality(pl.countries) = 0 OR u.country = ANY(pl.countries))
      AND (pl.pool IS NULL OR pl.pool = u.pool)
), lost AS (
    UPDATE attempts
    SET ended_at = now(), outcome = 'lost'
    FROM c
    WHERE attempts.job_id = c.id AND attempts.attempt < c.attempt AND attempts.ended_at IS NULL
    RETURNING attempts.job_id, attempts.attempt, attempts.worker_id, attempts.host, attempts.pid, attempts.heartbeat_at
), lostev AS (
    -- The loss is on the job's trail under the lost attempt, before the
    -- new attempt's "running" event (which reads this CTE to come after).
    INSERT INTO job_events (job_id, state, attempt, message)
    SELECT lost.job_id, 'running', lost.attempt,
           format('lost: worker %s on %s (pid %s) stopped renewing its lease (last heartbeat %s); the job is redelivered',
                  lost.worker_id, lost.host, lost.pid, COALESCE(to_char(lost.heartbeat_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC', 'none'))
    FROM lost
    RETURNING job_id
), a AS (
    INSERT INTO attempts (job_id, attempt, worker_id, host, pid, pool, node_id, canary_run_id, price_micros, currency, claim_id)
    SELECT c.id, c.attempt, c.worker_id, c.host, c.pid, c.pool, c.node_id, c.canary_run_id,
           c.price_micros, c.currency, c.claim_id
    FROM c
), ev AS (
    INSERT INTO job_events (job_id, state, attempt, message)
    SELECT c.id, 'running', c.attempt, c.message FROM c, (SELECT count(*) FROM lostev) AS after_losses
)
UPDATE jobs
SET attempt = c.attempt,
    state = 'running',
    preemptions = jobs.preemptions + CASE WHEN jobs.state = 'running' THEN 1 ELSE 0 END,
    lease_expires_at = now() + make_interval(secs => c.lease_seconds),
    reason = '',
    updated_at = now()
FROM c
WHERE jobs.id = c.id
RETURNING jobs.*;

-- name: JobLeaseRemaining :one
-- JobLeaseRemaining tells a worker that could not claim a job why: its state,
-- the residency of its current placement and, when another attempt runs it,
-- how long that attempt's lease lasts.
SELECT jobs.state, jobs.placement_version,
       GREATEST(EXTRACT(EPOCH FROM (jobs.lease_expires_at - now())), 0)::float8 AS lease_seconds,
       COALESCE(pl.residency, '')::text AS residency, COALESCE(pl.countries, '{}')::text[] AS countries
FROM jobs LEFT JOIN placements pl ON pl.job_id = jobs.id AND pl.version = jobs.placement_version
WHERE jobs.id = @id;

-- name: JobGetByClaim :one
-- JobGetByClaim finds a job still running under the attempt the claim
-- request claim_id started: a repeated claim returns that attempt.
SELECT jobs.* FROM jobs
JOIN attempts a ON a.job_id = jobs.id AND a.attempt = jobs.attempt
WHERE jobs.id = @id AND a.claim_id = @claim_id AND jobs.state::text = 'running'; -- by id alone (see JobClaimMany)

-- name: JobRefuseClaim :execrows
-- JobRefuseClaim counts a claim refused for residency against a job still
-- waiting under that placement; the caller re-places it.
UPDATE jobs SET claim_refusals = claim_refusals + 1, updated_at = now()
WHERE id = @id AND placement_version = @placement_version AND state::text = 'placed'; -- by id alone (see JobClaimMany)

-- name: JobHeartbeat :execrows
WITH j AS (
    UPDATE jobs
    SET lease_expires_at = now() + make_interval(secs => @lease_seconds::float8)
    WHERE id = @id AND attempt = @attempt AND state::text = 'running' -- by id alone (see JobClaimMany)
    RETURNING id
)
-- The attempt is looked up by its key, job id and attempt number: taking
-- the job id from j, the generic plan read every attempt of that number.
UPDATE attempts SET heartbeat_at = now()
WHERE attempts.job_id = @id AND attempts.attempt = @attempt AND EXISTS (SELECT 1 FROM j);

-- name: JobFenceLost :many
-- JobFenceLost hands back, in one statement, the attempts a lost worker held:
-- each job still running under the attempt that worker_id claimed on pool
-- goes back to placed with one preemption more, the attempt ends as lost and
-- a "placed" event says why. Every later write of such an attempt finds the
-- job no longer running under it and fails, so the worker, should it come
-- back, is fenced out. It returns the jobs it handed back.
-- Each job is looked up by its id alone (see JobClaimMany).
WITH u AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@attempts::int[]) AS attempt
    ORDER BY 1
), l AS (
    SELECT cur.id FROM u
    CROSS JOIN LATERAL (SELECT jobs.id, jobs.attempt, jobs.state FROM jobs WHERE jobs.id = u.id LIMIT 1 FOR UPDATE) cur
    WHERE cur.attempt = u.attempt AND cur.state = 'running'
      AND EXISTS (SELECT 1 FROM attempts a
                  WHERE a.job_id = u.id AND a.attempt = u.attempt AND a.worker_id = @worker_id
                    AND a.pool = @pool AND a.ended_at IS NULL)
), j AS (
    UPDATE jobs
    SET state = 'placed', preemptions = jobs.preemptions + 1, reason = @reason, lease_expires_at = NULL, updated_at = now()
    FROM l
    WHERE jobs.id = l.id
    RETURNING jobs.id, jobs.attempt
), a AS (
    UPDATE attempts
    SET ended_at = now(), outcome = 'lost'
    FROM j
    WHERE attempts.job_id = j.id AND attempts.attempt = j.attempt AND attempts.ended_at IS NULL
), ev AS (
    INSERT INTO job_events (job_id, state, attempt, message)
    SELECT j.id, 'placed', j.attempt, @reason FROM j
)
SELECT j.id, j.attempt FROM j;

-- name: JobSucceedMany :many
-- JobSucceedMany records the success of a batch of jobs, their attempts and
-- their "succeeded" events in one statement, each under its attempt number,
-- and returns the jobs it recorded; a superseded attempt changes nothing and
-- is left out of the result. A completion naming a pool (not '') records
-- only an attempt of that pool: a running job's current attempt was claimed
-- by a worker of the job's pool, which stays the same until the job is
-- placed again.
-- Each job is looked up by its id alone (see JobClaimMany).
WITH u AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@attempts::int[]) AS attempt, unnest(@pools::text[]) AS pool
    ORDER BY 1
), l AS (
    SELECT cur.id FROM u
    CROSS JOIN LATERAL (SELECT jobs.id, jobs.attempt, jobs.state, jobs.pool FROM jobs WHERE jobs.id = u.id LIMIT 1 FOR UPDATE) cur
    WHERE cur.attempt = u.attempt AND cur.state = 'running' AND (u.pool = '' OR cur.pool = u.pool)
), j AS (
    UPDATE jobs
    SET state = 'succeeded', exit_code = 0, reason = '', lease_expires_at = NULL, updated_at = now(), finalized_at = now()
    FROM l
    WHERE jobs.id = l.id
    RETURNING jobs.id, jobs.attempt
), a AS (
    UPDATE attempts
    SET ended_at = now(), outcome = 'succeeded', exit_code = 0
    FROM j
    WHERE attempts.job_id = j.id AND attempts.attempt = j.attempt AND attempts.ended_at IS NULL
)
INSERT INTO job_events (job_id, state, attempt, message)
SELECT j.id, 'succeeded', j.attempt, 'succeeded' FROM j
RETURNING job_id;

-- name: JobFail :execrows
UPDATE jobs
SET state = 'failed', errors = errors + 1, exit_code = sqlc.narg('exit_code'), reason = @reason,
    lease_expires_at = NULL, updated_at = now(), finalized_at = now()
WHERE id = @id AND attempt = @attempt AND state::text = 'running'; -- by id alone (see JobClaimMany)

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
WHERE id = @id AND attempt = @attempt AND state::text = 'running'; -- by id alone (see JobClaimMany)

-- name: JobCancel :one
UPDATE jobs
SET state = 'cancelled', reason = @reason, lease_expires_at = NULL, updated_at = now(), finalized_at = now()
WHERE id = @id AND state::text IN ('pending', 'waiting', 'placed', 'running') -- by id alone (see JobClaimMany)
RETURNING attempt;

-- name: JobMarkDead :execrows
-- JobMarkDead ends a job that can no longer make progress, under the attempt
-- that found so: a superseded attempt changes nothing.
UPDATE jobs
SET state = 'dead', reason = @reason, lease_expires_at = NULL, updated_at = now(), finalized_at = now()
WHERE id = @id AND attempt = @attempt AND state::text = 'running'; -- by id alone (see JobClaimMany)

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

-- name: JobListPage :many
-- JobListPage is one page of a listing scoped to @projects (every project
-- when @every), newest first; the page after a job starts strictly after
-- its (submitted_at, id).
SELECT * FROM jobs
WHERE (@every::boolean OR project = ANY(@projects::text[]))
  AND (sqlc.narg('state')::job_state IS NULL OR state = sqlc.narg('state')::job_state)
  AND (sqlc.narg('label_key')::text IS NULL OR spec->'labels'->>sqlc.narg('label_key')::text = sqlc.narg('label_value')::text)
  AND (sqlc.narg('since')::timestamptz IS NULL OR submitted_at >= sqlc.narg('since')::timestamptz)
  AND (sqlc.narg('pool')::text IS NULL OR pool = sqlc.narg('pool')::text)
  AND (sqlc.narg('after_at')::timestamptz IS NULL
       OR (submitted_at, id) < (sqlc.narg('after_at')::timestamptz, sqlc.narg('after_id')::uuid))
ORDER BY submitted_at DESC, id DESC
LIMIT @max_rows;

-- name: JobListRunsAfter :many
-- JobListRunsAfter is JobListPage of the jobs whose spec.after or
-- spec.after_ended names @runs_after. They are found first, through the
-- partial indexes on those lists, so that a job nothing runs after is
-- answered at once however many jobs are recorded.
WITH d AS MATERIALIZED (
  SELECT id FROM jobs
  WHERE spec->'after' @> jsonb_build_array(@runs_after::text)
     OR spec->'after_ended' @> jsonb_build_array(@runs_after::text))
SELECT j.* FROM jobs j JOIN d ON d.id = j.id
WHERE (@every::boolean OR j.project = ANY(@projects::text[]))
  AND (sqlc.narg('state')::job_state IS NULL OR j.state = sqlc.narg('state')::job_state)
  AND (sqlc.narg('label_key')::text IS NULL OR j.spec->'labels'->>sqlc.narg('label_key')::text = sqlc.narg('label_value')::text)
  AND (sqlc.narg('since')::timestamptz IS NULL OR j.submitted_at >= sqlc.narg('since')::timestamptz)
  AND (sqlc.narg('pool')::text IS NULL OR j.pool = sqlc.narg('pool')::text)
  AND (sqlc.narg('after_at')::timestamptz IS NULL
       OR (j.submitted_at, j.id) < (sqlc.narg('after_at')::timestamptz, sqlc.narg('after_id')::uuid))
ORDER BY j.submitted_at DESC, j.id DESC
LIMIT @max_rows;

-- name: JobCountByState :many
-- JobCountByState counts the jobs a listing with the same filters would
-- show (JobListPage, JobListRunsAfter), by state.
SELECT state, count(*)::bigint AS jobs FROM jobs
WHERE (@every::boolean OR project = ANY(@projects::text[]))
  AND (sqlc.narg('state')::job_state IS NULL OR state = sqlc.narg('state')::job_state)
  AND (sqlc.narg('label_key')::text IS NULL OR spec->'labels'->>sqlc.narg('label_key')::text = sqlc.narg('label_value')::text)
  AND (sqlc.narg('since')::timestamptz IS NULL OR submitted_at >= sqlc.narg('since')::timestamptz)
  AND (sqlc.narg('pool')::text IS NULL OR pool = sqlc.narg('pool')::text)
  AND (sqlc.narg('runs_after')::text IS NULL
       OR spec->'after' @> jsonb_build_array(sqlc.narg('runs_after')::text)
       OR spec->'after_ended' @> jsonb_build_array(sqlc.narg('runs_after')::text))
GROUP BY state;

-- name: JobLedger :many
-- JobLedger is the budget ledger of projects' jobs: each job submitted
-- since a time, or unfinished, or with an attempt started since then, with
-- its current placement's provider, region and estimate, and what its
-- attempts started since then have accrued, per currency. A job not placed
-- has empty placement columns and one row with an empty currency.
SELECT j.id, j.project, j.name, j.state::text AS state,
       COALESCE(p.provider, '')::text AS provider, COALESCE(p.region, '')::text AS region, COALESCE(p.pool, '')::text AS pool,
       COALESCE(p.estimate_micros, 0)::bigint AS estimate_micros, COALESCE(p.estimate_currency, '')::text AS estimate_currency,
       COALESCE(a.currency, '')::text AS currency, COALESCE(a.micros, 0)::bigint AS accrued_micros
FROM jobs j
LEFT JOIN placements p ON p.job_id = j.id AND p.version = j.placement_version
LEFT JOIN LATERAL (
    SELECT a.currency,
           SUM(a.price_micros * EXTRACT(EPOCH FROM (COALESCE(a.ended_at, a.heartbeat_at) - a.started_at)) / 3600)::bigint AS micros
    FROM attempts a
    WHERE a.job_id = j.id AND a.started_at >= @since AND a.currency <> ''
    GROUP BY a.currency
) a ON true
WHERE j.project = ANY(@projects::text[])
  AND (j.submitted_at >= @since OR j.finalized_at IS NULL
       OR EXISTS (SELECT 1 FROM attempts x WHERE x.job_id = j.id AND x.started_at >= @since))
ORDER BY j.project, j.submitted_at DESC, j.id, a.currency
LIMIT @max_rows::int;

-- name: JobsRunningWithDeadline :many
-- JobsRunningWithDeadline lists the running jobs the spot strategy places
-- (spot-then-on-demand, with a deadline and an expected duration) with the
-- pool each runs in, for the rebalancer to ask whether those on on-demand
-- should leave it for spot.
SELECT id, COALESCE(pool, '')::text AS pool FROM jobs
WHERE state = 'running'
  AND COALESCE(spec->'placement'->>'tier', 'spot-then-on-demand') = 'spot-then-on-demand'
  AND spec ? 'deadline' AND spec ? 'expected_duration'
ORDER BY id;

-- name: JobCountUnfinished :many
-- JobCountUnfinished counts the jobs not yet finished of every recorded
-- project in each unfinished state (pending, waiting, placed, running), 0
-- included,
-- through the unfinished jobs' index.
SELECT p.name AS project, s.state::text AS state, count(j.id) AS jobs
FROM projects p
CROSS JOIN unnest('{pending,waiting,placed,running}'::job_state[]) AS s(state)
LEFT JOIN jobs j ON j.project = p.name AND j.finalized_at IS NULL AND j.state = s.state
GROUP BY p.name, s.state;

-- name: JobPoolLine :one
-- JobPoolLine says where a placed job stands in its pool: how many of the
-- pool's placed jobs have waited longer (placed or handed back before it, or
-- at the same moment with a lower id) and how many of its jobs run now.
SELECT
    (SELECT count(*) FROM jobs w
     WHERE w.state = 'placed' AND w.pool = @pool::text AND (w.updated_at, w.id) < (@since::timestamptz, @id::uuid)) AS ahead,
    (SELECT count(*) FROM jobs r WHERE r.state = 'running' AND r.pool = @pool::text) AS running;

-- name: JobRetry :execrows
-- JobRetry brings a job that failed, died, was cancelled or was rejected back
-- to pending, under the placement version it finished with, so that the
-- placement that follows in the same transaction numbers the next one. Its
-- error and preemption counts start again from zero; its attempts, trail
-- and checkpoints stay, so it resumes from its latest checkpoint.
UPDATE jobs
SET state = 'pending', errors = 0, preemptions = 0, exit_code = NULL, reason = '',
    lease_expires_at = NULL, updated_at = now(), finalized_at = NULL
WHERE id = @id AND state::text = @state::text AND placement_version = @placement_version
  AND state::text IN ('failed', 'dead', 'cancelled', 'rejected'); -- by id alone (see JobClaimMany)

-- name: JobDependencies :many
-- JobDependencies reads the jobs others run after (spec.after and
-- spec.after_ended): their project, name, state and reason. An id of no job
-- has no row.
SELECT id, project, name, state, reason FROM jobs WHERE id = ANY(@ids::uuid[]);

-- name: JobDependents :many
-- JobDependents reads the jobs of @project whose spec.after or
-- spec.after_ended names @id, in the order they were submitted, through the
-- partial indexes on those lists (see JobListRunsAfter).
WITH d AS MATERIALIZED (
  SELECT jobs.id FROM jobs
  WHERE spec->'after' @> jsonb_build_array(@id::text)
     OR spec->'after_ended' @> jsonb_build_array(@id::text))
SELECT j.id, j.name, j.state FROM jobs j JOIN d ON d.id = j.id
WHERE j.project = @project
ORDER BY j.submitted_at, j.id
LIMIT @max_rows;

-- name: JobWait :execrows
-- JobWait records a job not placed yet as waiting for the jobs it runs
-- after; a retried job's pool is its next placement's, not its last one's.
UPDATE jobs SET state = 'waiting', pool = NULL, updated_at = now()
WHERE id = @id AND state::text = 'pending'; -- by id alone (see JobClaimMany)

-- name: JobRelease :execrows
-- JobRelease brings a waiting job back to pending, for the placement or
-- rejection committed after it in the same transaction.
UPDATE jobs SET state = 'pending', updated_at = now()
WHERE id = @id AND state::text = 'waiting'; -- by id alone (see JobClaimMany)

-- name: JobCancelWaiting :many
-- JobCancelWaiting ends a waiting job that can no longer run: a job it runs
-- after ended otherwise than succeeded. No row: it was no longer waiting.
UPDATE jobs
SET state = 'cancelled', reason = @reason, updated_at = now(), finalized_at = now()
WHERE id = @id AND state::text = 'waiting' -- by id alone (see JobClaimMany)
RETURNING attempt;

-- name: JobListWaitingSettled :many
-- JobListWaitingSettled finds the waiting jobs whose fate is settled, longest
-- waiting first: those none of whose jobs to run after (spec.after and
-- spec.after_ended) is unfinished (each one succeeded, ended otherwise, or is
-- gone), and those a job of whose spec.after ended otherwise than succeeded,
-- which can no longer run whatever the others do.
-- Each job named is looked up by its id alone, so that the cost stays that of
-- the waiting jobs' ids however many jobs are recorded.
SELECT j.id FROM jobs j
WHERE j.state = 'waiting'
  AND (NOT EXISTS (
         SELECT 1 FROM jsonb_array_elements_text(coalesce(j.spec->'after', '[]') || coalesce(j.spec->'after_ended', '[]')) AS a(id)
         CROSS JOIN LATERAL (SELECT d.state FROM jobs d WHERE d.id = a.id::uuid LIMIT 1) d
         WHERE d.state::text IN ('pending', 'waiting', 'placed', 'running'))
       OR EXISTS (
         SELECT 1 FROM jsonb_array_elements_text(j.spec->'after') AS a(id)
         CROSS JOIN LATERAL (SELECT d.state FROM jobs d WHERE d.id = a.id::uuid LIMIT 1) d
         WHERE d.state::text IN ('failed', 'dead', 'cancelled', 'rejected')))
ORDER BY j.updated_at
LIMIT @max_rows;
