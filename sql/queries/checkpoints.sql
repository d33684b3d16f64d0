-- name: CheckpointInsert :one
-- CheckpointInsert records a checkpoint under the attempt that made it. The
-- row lock on the job orders it against claims, so a superseded attempt
-- inserts nothing, and seq only grows.
INSERT INTO checkpoints (job_id, seq, attempt, bytes, sha256, region, store_uri)
SELECT j.id,
       COALESCE((SELECT max(c.seq) FROM checkpoints c WHERE c.job_id = j.id), 0) + 1,
       j.attempt, @bytes, @sha256, @region, @store_uri
FROM (
    SELECT jobs.id, jobs.attempt FROM jobs
    WHERE jobs.id = @job_id AND jobs.attempt = @attempt AND jobs.state = 'running'
    FOR UPDATE
) j
RETURNING seq;

-- name: CheckpointLatest :one
SELECT * FROM checkpoints WHERE job_id = @job_id ORDER BY seq DESC LIMIT 1;

-- name: CheckpointListByJob :many
SELECT * FROM checkpoints WHERE job_id = @job_id ORDER BY seq;
