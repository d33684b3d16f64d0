-- gpuq schema: a job whose spec names jobs to run after (spec.after, job
-- ids of its project) is recorded waiting, and placed once every one of them
-- has succeeded. No table of its own: the spec holds the ids, and the
-- waiting jobs are found by jobs_state_updated. The value is added last, as
-- PostgreSQL compares enum values fastest when their order is the order
-- they were added in (the index on state compares them on every write).
ALTER TYPE job_state ADD VALUE IF NOT EXISTS 'waiting';
