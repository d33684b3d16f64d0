-- gpuq schema, version 1: projects, jobs, attempts, checkpoints, placements, job events.

-- job_state mirrors queue.JobState. Terminal states: succeeded, failed,
-- cancelled, rejected, dead.
CREATE TYPE job_state AS ENUM (
    'pending',    -- recorded by the scheduler, not yet placed
    'placed',     -- placed and published to its pool's subject
    'running',    -- claimed by a worker under the current attempt
    'succeeded',
    'failed',
    'cancelled',
    'rejected',
    'dead'
);

CREATE TABLE projects (
    name        text PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE jobs (
    id                uuid PRIMARY KEY,
    project           text NOT NULL REFERENCES projects (name),
    name              text NOT NULL,
    idempotency_key   text,
    spec              jsonb NOT NULL,
    state             job_state NOT NULL DEFAULT 'pending',
    -- attempt is the number of the current (or last) claim; it fences every
    -- write a worker makes.
    attempt           integer NOT NULL DEFAULT 0,
    errors            integer NOT NULL DEFAULT 0,
    preemptions       integer NOT NULL DEFAULT 0,
    placement_version integer NOT NULL DEFAULT 0,
    -- checkpoint_seq is the sequence number of the job's latest checkpoint;
    -- incrementing it under the row lock orders concurrent commits.
    checkpoint_seq    integer NOT NULL DEFAULT 0,
    pool              text,
    exit_code         integer,
    reason            text NOT NULL DEFAULT '',
    lease_expires_at  timestamptz,
    submitted_at      timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finalized_at      timestamptz,
    CONSTRAINT jobs_idempotency_key UNIQUE (project, idempotency_key),
    CONSTRAINT jobs_finalized_only_when_terminal CHECK (
        (state IN ('succeeded', 'failed', 'cancelled', 'rejected', 'dead')) = (finalized_at IS NOT NULL)
    )
);

CREATE INDEX jobs_state_updated ON jobs (state, updated_at);
CREATE INDEX jobs_project_submitted ON jobs (project, submitted_at DESC);

CREATE TABLE attempts (
    job_id        uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt       integer NOT NULL,
    worker_id     text NOT NULL,
    host          text NOT NULL,
    pid           integer NOT NULL,
    pool          text NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz,
    -- outcome: succeeded, failed, preempted, lost, fenced, cancelled, timeout.
    outcome       text NOT NULL DEFAULT '',
    exit_code     integer,
    PRIMARY KEY (job_id, attempt)
);

CREATE TABLE checkpoints (
    job_id      uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    seq         integer NOT NULL,
    attempt     integer NOT NULL,
    bytes       bigint NOT NULL,
    sha256      text NOT NULL,
    region      text NOT NULL,
    store_uri   text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, seq)
);

CREATE TABLE placements (
    job_id      uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    version     integer NOT NULL,
    pool        text NOT NULL,
    region      text NOT NULL,
    -- residency is the class the job is bound to and countries its members;
    -- they travel with the run message so that workers can refuse a job
    -- outside them.
    residency   text NOT NULL DEFAULT '',
    countries   text[] NOT NULL DEFAULT '{}',
    decision    jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, version)
);

CREATE TABLE job_events (
    id        bigserial PRIMARY KEY,
    job_id    uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    at        timestamptz NOT NULL DEFAULT now(),
    state     job_state NOT NULL,
    attempt   integer NOT NULL,
    message   text NOT NULL DEFAULT ''
);

CREATE INDEX job_events_job ON job_events (job_id, id);

-- results: the packed GPUQ_OUTPUT_DIR of a succeeded job.
CREATE TABLE results (
    job_id      uuid PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    bytes       bigint NOT NULL,
    sha256      text NOT NULL,
    region      text NOT NULL,
    store_uri   text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
