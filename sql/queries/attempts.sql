-- name: AttemptInsert :exec
INSERT INTO attempts (job_id, attempt, worker_id, host, pid, pool, node_id, canary_run_id)
VALUES (@job_id, @attempt, @worker_id, @host, @pid, @pool, @node_id, sqlc.narg('canary_run_id'));

-- name: AttemptEnd :exec
UPDATE attempts
SET ended_at = now(), outcome = @outcome, exit_code = sqlc.narg('exit_code')
WHERE job_id = @job_id AND attempt = @attempt AND ended_at IS NULL;

-- name: AttemptEndLost :exec
-- AttemptEndLost closes the attempts a new claim superseded: their worker
-- stopped heartbeating without saying why.
UPDATE attempts
SET ended_at = now(), outcome = 'lost'
WHERE job_id = @job_id AND attempt < @attempt AND ended_at IS NULL;

-- name: AttemptListByJob :many
SELECT * FROM attempts WHERE job_id = @job_id ORDER BY attempt;
