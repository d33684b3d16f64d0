-- gpuq schema: budget reservations and bounded checkpoint storage.
--
-- A placement records the estimated cost of the job on its chosen offer
-- (estimate_micros in estimate_currency) and the provider of that offer. An
-- unfinished job reserves its current placement's estimate less what its
-- attempts have accrued; committing placements checks project budgets
-- against spend plus these reservations under a per-project advisory lock,
-- so that concurrent schedulers cannot overspend together. A finished job
-- reserves nothing: the unused part of its estimate is released.
ALTER TABLE placements
    ADD COLUMN estimate_micros bigint NOT NULL DEFAULT 0 CHECK (estimate_micros >= 0),
    ADD COLUMN estimate_currency text NOT NULL DEFAULT '',
    ADD COLUMN provider text NOT NULL DEFAULT '';

CREATE INDEX jobs_project_unfinished ON jobs (project) WHERE finalized_at IS NULL;

-- checkpoint_garbage holds the archives of checkpoints removed from the
-- record (older than a job's latest N, or of a job finished longer ago than
-- the retention) until the control plane has deleted them from their store.
-- Their bytes still count against the project's stored-bytes quota until
-- then.
CREATE TABLE checkpoint_garbage (
    store_uri  text PRIMARY KEY,
    job_id     uuid NOT NULL,
    project    text NOT NULL,
    bytes      bigint NOT NULL,
    queued_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX checkpoints_created ON checkpoints (created_at);
