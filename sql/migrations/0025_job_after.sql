-- gpuq schema: a job whose spec names jobs to run after (spec.after, job
-- ids of its project) is recorded waiting, and placed once every one of them
-- has succeeded. No table of its own: the spec holds the ids, and the
-- waiting jobs are found by jobs_state_updated.
ALTER TYPE job_state ADD VALUE IF NOT EXISTS 'waiting' BEFORE 'placed';
