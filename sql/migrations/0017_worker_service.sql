-- gpuq schema: the worker service.
--
-- claim_id names the claim request that started an attempt, so that a claim
-- repeated after its reply was lost (the server that took it died) returns
-- the attempt it started instead of finding the job running under it.
ALTER TABLE attempts ADD COLUMN claim_id uuid;

-- claim_refusals counts the claims the control plane refused because the
-- claiming pool lies outside the job's residency; each one hands the job back
-- for re-placement instead of ending it.
ALTER TABLE jobs ADD COLUMN claim_refusals integer NOT NULL DEFAULT 0;

-- A checkpoint recorded twice (a repeated request) is one checkpoint: its
-- archive's name is unique per job.
CREATE UNIQUE INDEX checkpoints_job_store_uri ON checkpoints (job_id, store_uri);
