-- name: InstanceInsert :one
-- InstanceInsert records a launch before the provider is asked, with its
-- "requested" event.
WITH i AS (
    INSERT INTO instances (id, provider, pool, project, client_token, slots, price_micros, currency, billing)
    VALUES (@id, @provider, @pool, @project, @client_token, @slots, @price_micros, @currency, @billing)
    RETURNING *
), e AS (
    INSERT INTO instance_events (instance_id, state, message)
    SELECT i.id, 'requested', @message::text FROM i
)
SELECT * FROM i;

-- name: InstanceTransition :one
-- InstanceTransition moves an instance from one of the states in from_states
-- to state and records the event; it returns no row when the instance is in
-- none of them, so a repeated or raced transition changes nothing.
-- provider_id and launched_at are kept when given empty or null.
WITH i AS (
    UPDATE instances
    SET state = @state::instance_state,
        provider_id = CASE WHEN @provider_id::text <> '' THEN @provider_id::text ELSE instances.provider_id END,
        launched_at = COALESCE(instances.launched_at, sqlc.narg('launched_at')::timestamptz),
        ready_at = CASE WHEN @state::instance_state = 'ready' THEN COALESCE(instances.ready_at, now()) ELSE instances.ready_at END,
        drain_at = CASE WHEN @state::instance_state = 'draining' THEN now() ELSE instances.drain_at END,
        ended_at = CASE WHEN @state::instance_state IN ('terminated', 'preempted', 'failed')
                        THEN GREATEST(COALESCE(instances.launched_at, sqlc.narg('launched_at')::timestamptz, now()),
                                      COALESCE(sqlc.narg('ended_at')::timestamptz, now()))
                        ELSE NULL END,
        reason = CASE WHEN @reason::text <> '' THEN @reason::text ELSE instances.reason END
    WHERE instances.id = @id AND instances.state = ANY(@from_states::instance_state[])
    RETURNING *
), e AS (
    INSERT INTO instance_events (instance_id, state, message)
    SELECT i.id, i.state, @reason::text FROM i
)
SELECT * FROM i;

-- name: InstanceSetWorkerSeen :exec
UPDATE instances SET worker_seen_at = GREATEST(worker_seen_at, @seen_at::timestamptz)
WHERE id = @id;

-- name: InstanceGet :one
SELECT * FROM instances WHERE id = @id;

-- name: InstanceList :many
SELECT * FROM instances
WHERE (sqlc.narg('pool')::text IS NULL OR pool = sqlc.narg('pool')::text)
  AND (sqlc.narg('state')::instance_state IS NULL OR state = sqlc.narg('state')::instance_state)
ORDER BY requested_at, id
LIMIT @max_rows;

-- name: InstanceListLive :many
SELECT * FROM instances
WHERE state IN ('requested', 'pending', 'ready', 'draining')
ORDER BY requested_at, id;

-- name: InstanceListBilledSince :many
-- InstanceListBilledSince lists the instances billed at some time after
-- since: still live, or ended after it.
SELECT * FROM instances
WHERE launched_at IS NOT NULL AND (ended_at IS NULL OR ended_at > @since::timestamptz)
ORDER BY requested_at, id;

-- name: InstanceCountLaunchedSince :one
SELECT count(*)::int FROM instances WHERE pool = @pool AND requested_at > @since::timestamptz;

-- name: InstanceEventList :many
-- InstanceEventList is an instance's events as they are announced.
SELECT e.id, e.instance_id, i.pool, i.provider, i.project, e.at, e.state, e.message
FROM instance_events e JOIN instances i ON i.id = e.instance_id
WHERE e.instance_id = @instance_id
ORDER BY e.id;

-- name: InstanceEventListUnannounced :many
-- InstanceEventListUnannounced is the oldest committed events not yet
-- announced on JetStream. An instance's events get their ids under its
-- row's lock, so id order is the order they committed in.
SELECT e.id, e.instance_id, i.pool, i.provider, i.project, e.at, e.state, e.message
FROM instance_events e JOIN instances i ON i.id = e.instance_id
WHERE NOT e.announced
ORDER BY e.id
LIMIT @max_rows;

-- name: InstanceEventSetAnnounced :exec
UPDATE instance_events SET announced = true WHERE id = ANY(@ids::bigint[]) AND NOT announced;

-- name: InstanceWorkerActivity :many
-- InstanceWorkerActivity is what the instances' workers have written: the
-- jobs each one runs now, its latest attempt activity (the instance's
-- request time when it has none) and its node's canary record.
SELECT i.id,
       (SELECT count(*) FROM attempts a JOIN jobs j ON j.id = a.job_id AND j.attempt = a.attempt
        WHERE a.node_id = i.id AND a.ended_at IS NULL AND j.state = 'running')::int AS busy,
       COALESCE((SELECT max(GREATEST(a.heartbeat_at, COALESCE(a.ended_at, a.heartbeat_at)))
                 FROM attempts a WHERE a.node_id = i.id), i.requested_at)::timestamptz AS last_active_at,
       n.last_canary_at, n.quarantined_at, COALESCE(n.quarantine_reason, '')::text AS quarantine_reason
FROM instances i LEFT JOIN nodes n ON n.id = i.id
WHERE i.id = ANY(@ids::text[]);

-- name: InstanceAttemptsOf :many
-- InstanceAttemptsOf lists the attempts that ran on the instances, with
-- their jobs' projects, for attributing the instances' bill.
SELECT a.node_id, a.job_id, a.attempt, j.project, a.started_at,
       COALESCE(a.ended_at, a.heartbeat_at)::timestamptz AS until
FROM attempts a JOIN jobs j ON j.id = a.job_id
WHERE a.node_id = ANY(@ids::text[])
ORDER BY a.node_id, a.started_at;

-- name: JobPoolDemand :many
-- JobPoolDemand is, per pool and project, the jobs waiting to be claimed
-- (and since when the oldest waits) and the jobs running.
SELECT pool::text AS pool, project,
       (count(*) FILTER (WHERE state = 'placed'))::int AS waiting,
       COALESCE(min(updated_at) FILTER (WHERE state = 'placed'), now())::timestamptz AS oldest_waiting,
       (count(*) FILTER (WHERE state = 'running'))::int AS running
FROM jobs
WHERE state IN ('placed', 'running') AND pool IS NOT NULL
GROUP BY pool, project
ORDER BY pool, project;

-- name: JobListWaitingInPool :many
SELECT id FROM jobs
WHERE state = 'placed' AND pool = @pool::text
ORDER BY updated_at
LIMIT @max_rows;

-- name: JobEventNote :execrows
-- JobEventNote records a note in a job's audit trail under its current
-- state and attempt.
INSERT INTO job_events (job_id, state, attempt, message)
SELECT jobs.id, jobs.state, jobs.attempt, @message FROM jobs WHERE jobs.id = @id;
