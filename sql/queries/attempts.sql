-- name: AttemptEnd :exec
UPDATE attempts
SET ended_at = now(), outcome = @outcome, exit_code = sqlc.narg('exit_code')
WHERE job_id = @job_id AND attempt = @attempt AND ended_at IS NULL;

-- name: AttemptListByJob :many
SELECT * FROM attempts WHERE job_id = @job_id ORDER BY attempt;

-- name: AttemptSpendByProject :many
-- AttemptSpendByProject sums what a project's attempts started since a time
-- have cost so far, per currency: price × (last heartbeat or end − start).
SELECT a.currency,
       COALESCE(SUM(a.price_micros * EXTRACT(EPOCH FROM (COALESCE(a.ended_at, a.heartbeat_at) - a.started_at)) / 3600), 0)::bigint AS micros
FROM attempts a
JOIN jobs j ON j.id = a.job_id
WHERE j.project = @project AND a.started_at >= @since AND a.currency <> ''
GROUP BY a.currency
ORDER BY a.currency;

-- name: AttemptPools :many
-- AttemptPools says which pool claimed each attempt named, so that a
-- worker of one pool cannot write into another pool's attempts.
WITH u AS (
    SELECT unnest(@job_ids::uuid[]) AS job_id, unnest(@attempts::int[]) AS attempt
)
SELECT a.job_id, a.attempt, a.pool
FROM attempts a JOIN u ON a.job_id = u.job_id AND a.attempt = u.attempt;

-- name: RunningJobSpend :many
-- RunningJobSpend lists each running job with what all its attempts have
-- cost so far, per currency (price × (last heartbeat or end − start)), and
-- its own total budget, for stopping the jobs that reached a budget.
SELECT j.id, j.project, j.attempt, COALESCE(j.spec->'budget'->>'total', '')::text AS budget_total,
       a.currency,
       COALESCE(SUM(a.price_micros * EXTRACT(EPOCH FROM (COALESCE(a.ended_at, a.heartbeat_at) - a.started_at)) / 3600), 0)::bigint AS micros
FROM jobs j
JOIN attempts a ON a.job_id = j.id
WHERE j.state = 'running' AND a.currency <> ''
GROUP BY j.id, a.currency
ORDER BY j.id, a.currency;

-- name: JobSpend :many
-- JobSpend sums what a job's attempts have cost so far, per currency, as
-- AttemptSpendByProject does.
SELECT a.currency,
       COALESCE(SUM(a.price_micros * EXTRACT(EPOCH FROM (COALESCE(a.ended_at, a.heartbeat_at) - a.started_at)) / 3600), 0)::bigint AS micros
FROM attempts a
WHERE a.job_id = @job_id AND a.currency <> ''
GROUP BY a.currency
ORDER BY a.currency;
