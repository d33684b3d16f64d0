-- gpuq schema: the jobs that run after a job (gpuq ls --runs-after, gpuq
-- retry --downstream) are found through these partial indexes on the
-- spec's lists, which hold only the jobs that have such a list: a job
-- without one costs the predicate's check and nothing else on a write.
CREATE INDEX IF NOT EXISTS jobs_after ON jobs USING gin ((spec->'after') jsonb_path_ops)
  WHERE spec->'after' IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_after_ended ON jobs USING gin ((spec->'after_ended') jsonb_path_ops)
  WHERE spec->'after_ended' IS NOT NULL;
