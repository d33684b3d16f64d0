-- name: ResultInsert :execrows
-- ResultInsert records a job's packed outputs under the attempt that made
-- them; a superseded attempt inserts nothing.
INSERT INTO results (job_id, attempt, bytes, sha256, region, store_uri)
SELECT jobs.id, jobs.attempt, @bytes, @sha256, @region, @store_uri
FROM jobs WHERE jobs.id = @job_id AND jobs.attempt = @attempt AND jobs.state::text = 'running' -- by id alone (see JobClaimMany)
ON CONFLICT (job_id) DO UPDATE
SET attempt = EXCLUDED.attempt, bytes = EXCLUDED.bytes, sha256 = EXCLUDED.sha256,
    region = EXCLUDED.region, store_uri = EXCLUDED.store_uri, created_at = now();

-- name: ResultGet :one
SELECT * FROM results WHERE job_id = @job_id;
