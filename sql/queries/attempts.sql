-- name: AttemptEnd :exec
UPDATE attempts
SET ended_at = now(), outcome = @outcome, exit_code = sqlc.narg('exit_code')
WHERE job_id = @job_id AND attempt = @attempt AND ended_at IS NULL;

-- name: AttemptListByJob :many
SELECT * FROM attempts WHERE job_id = @job_id ORDER BY attempt;
