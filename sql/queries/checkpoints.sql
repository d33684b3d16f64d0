-- name: CheckpointInsert :one
-- CheckpointInsert records a checkpoint under the attempt that made it. The
-- sequence number comes from the job row, incremented under its row lock, so
-- concurrent commits get distinct, growing numbers and a superseded attempt
-- inserts nothing.
WITH j AS (
    UPDATE jobs
    SET checkpoint_seq = checkpoint_seq + 1
    WHERE jobs.id = @job_id AND jobs.attempt = @attempt AND jobs.state::text = 'running' -- by id alone (see JobClaimMany)
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
-- CheckpointGetByURI finds the checkpoint recorded with an archive: a
-- repeated record returns it instead of inserting it twice.
SELECT * FROM checkpoints WHERE job_id = @job_id AND store_uri = @store_uri;

-- name: CheckpointPruneJob :exec
-- CheckpointPruneJob moves a job's checkpoints older than its latest keep
-- into checkpoint_garbage, whose archives the control plane deletes.
-- Sequence numbers are consecutive, so the latest keep are those within
-- keep of the job's checkpoint_seq.
WITH d AS (
    DELETE FROM checkpoints c
    USING jobs j
    WHERE j.id = @job_id AND c.job_id = j.id AND c.seq <= j.checkpoint_seq - @keep::int
    RETURNING c.job_id, c.store_uri, c.bytes
)
INSERT INTO checkpoint_garbage (store_uri, job_id, project, bytes)
SELECT d.store_uri, d.job_id, j.project, d.bytes FROM d JOIN jobs j ON j.id = d.job_id
ON CONFLICT (store_uri) DO NOTHING;

-- name: CheckpointPrune :execrows
-- CheckpointPrune moves into checkpoint_garbage every checkpoint older than
-- its job's latest keep, and every checkpoint of a job finished before
-- finished_before.
WITH d AS (
    DELETE FROM checkpoints c
    USING jobs j
    WHERE c.job_id = j.id
      AND (c.seq <= j.checkpoint_seq - @keep::int OR j.finalized_at < @finished_before::timestamptz)
    RETURNING c.job_id, c.store_uri, c.bytes
)
INSERT INTO checkpoint_garbage (store_uri, job_id, project, bytes)
SELECT d.store_uri, d.job_id, j.project, d.bytes FROM d JOIN jobs j ON j.id = d.job_id
ON CONFLICT (store_uri) DO NOTHING;

-- name: CheckpointGarbageList :many
SELECT * FROM checkpoint_garbage ORDER BY queued_at, store_uri LIMIT @max_rows::int;

-- name: CheckpointGarbageDelete :exec
DELETE FROM checkpoint_garbage WHERE store_uri = ANY(@store_uris::text[]);

-- name: ArchivesRecorded :many
-- ArchivesRecorded returns which of the given archives, each with the job
-- it belongs to, a checkpoint, a job's results or checkpoint_garbage still
-- names; the others no record will ever read. Each is looked up by its job.
SELECT a.store_uri::text AS store_uri
FROM (SELECT unnest(@job_ids::uuid[]) AS job_id, unnest(@store_uris::text[]) AS store_uri) AS a
WHERE EXISTS (SELECT 1 FROM checkpoints c WHERE c.job_id = a.job_id AND c.store_uri = a.store_uri)
   OR EXISTS (SELECT 1 FROM results r WHERE r.job_id = a.job_id AND r.store_uri = a.store_uri)
   OR EXISTS (SELECT 1 FROM checkpoint_garbage g WHERE g.store_uri = a.store_uri);

-- name: CheckpointsLeft :one
-- CheckpointsLeft tells whether a job that recorded checkpoints still has
-- any: a finished job's are deleted after the retention.
SELECT j.checkpoint_seq, (SELECT count(*) FROM checkpoints c WHERE c.job_id = j.id) AS left_count
FROM jobs j WHERE j.id = @job_id;
