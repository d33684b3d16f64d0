-- name: NotificationsDue :many
-- NotificationsDue returns the ends waiting to be notified whose next try
-- is due, oldest end first, with their delivery so far (tries 0 when none).
-- It reads the jobs through jobs_notify_due, which holds only those.
SELECT j.id, j.project, j.name, j.state, j.exit_code, j.reason, j.attempt, j.errors, j.preemptions,
       (j.spec->'notify')::jsonb AS notify, COALESCE(j.spec->'labels', '{}')::jsonb AS labels, j.submitted_at, j.finalized_at::timestamptz AS finalized_at,
       COALESCE(n.tries, 0)::int AS tries
FROM jobs j
LEFT JOIN job_notifications n ON n.job_id = j.id AND n.finalized_at = j.finalized_at
WHERE j.spec->'notify' IS NOT NULL AND j.finalized_at IS NOT NULL AND j.notified_at IS DISTINCT FROM j.finalized_at
  AND (n.next_at IS NULL OR n.next_at <= now())
ORDER BY j.finalized_at
LIMIT @max_rows;

-- name: NotificationTried :exec
-- NotificationTried records a try of an end's delivery: outcome pending
-- with the next try's time, or delivered or failed, which also marks the
-- end notified. Nothing changes for an end the job has since left (a retry).
WITH n AS (
    INSERT INTO job_notifications (job_id, finalized_at, state, tries, next_at, last_at, http_status, error, outcome)
    SELECT j.id, j.finalized_at, j.state, 1, sqlc.narg('next_at'), now(), @http_status, @error, @outcome
    FROM jobs j WHERE j.id = @job_id AND j.finalized_at = @finalized_at::timestamptz
    ON CONFLICT (job_id, finalized_at) DO UPDATE
    SET tries = job_notifications.tries + 1, next_at = EXCLUDED.next_at, last_at = EXCLUDED.last_at,
        http_status = EXCLUDED.http_status, error = EXCLUDED.error, outcome = EXCLUDED.outcome
    RETURNING job_id
)
UPDATE jobs SET notified_at = @finalized_at::timestamptz
WHERE jobs.id = (SELECT job_id FROM n) AND @outcome::text <> 'pending';

-- name: NotificationSkipped :exec
-- NotificationSkipped marks an end its job did not ask to be notified of.
UPDATE jobs SET notified_at = @finalized_at::timestamptz
WHERE id = @job_id AND finalized_at = @finalized_at::timestamptz;

-- name: NotificationLatest :many
-- NotificationLatest returns the delivery of a job's latest end, if any.
SELECT n.state, n.finalized_at, n.tries, n.next_at, n.last_at, n.http_status, n.error, n.outcome
FROM job_notifications n
WHERE n.job_id = @job_id
ORDER BY n.finalized_at DESC
LIMIT 1;
