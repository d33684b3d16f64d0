-- name: CheckpointInsert :one
-- CheckpointInsert records a checkpoint under the attempt that made it. The
-- sequence number comes from the job row, incremented under its row lock, so
-- concurrent commits get distinct, growing numbers and a superseded attempt
-- inserts nothing.
WITH j AS (
    UPDATE jobs
    SET checkpoint_seq = checkpoint_seq + 1
    WHERE jobs.id = @job_id AND jobs.attempt = @attempt AND jobs.state = 'running'
    RETURNING jobs.id, jobs.attempt, jobs.checkpoint_seq
)
INSERT INTO checkpoints (job_id, seq, attempt, bytes, sha256, region, store_uri)
SELECT j.id, j.checkpoint_seq, j.attempt, @bytes, @sha256, @region, @store_uri
FROM j
RETURNING seq;

-- name: CheckpointLatest :one
SELECT * FROM checkpoints WHERE job_id = @job_id ORDER BY seq DESC LIMIT 1;

-- name: CheckpointListByJob :many
SELECT * FROM checkpoints WHERE job_id = @job_id ORDER BY seq;

-- name: CheckpointGetByURI :one
-- CheckpointGetByURI finds a checkpoint an attempt recorded: a repeated
-- record returns it instead of inserting it twice.
SELECT * FROM checkpoints WHERE job_id = @job_id AND attempt = @attempt AND store_uri = @store_uri;
