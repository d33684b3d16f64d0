-- gpuq schema, version 2: nodes and their canary results.

-- A node is one machine a worker runs on: the provider's instance id where
-- known, else the host name. Its canary history counts against it.
CREATE TABLE nodes (
    id                    text PRIMARY KEY,
    pool                  text NOT NULL,
    host                  text NOT NULL,
    first_seen_at         timestamptz NOT NULL DEFAULT now(),
    last_canary_at        timestamptz,
    last_canary_ok        boolean,
    last_canary_summary   text NOT NULL DEFAULT '',
    canary_runs           integer NOT NULL DEFAULT 0,
    canary_failures       integer NOT NULL DEFAULT 0,
    consecutive_failures  integer NOT NULL DEFAULT 0,
    quarantined_at        timestamptz,
    quarantine_reason     text NOT NULL DEFAULT ''
);

CREATE TABLE canary_runs (
    id        bigserial PRIMARY KEY,
    node_id   text NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    at        timestamptz NOT NULL DEFAULT now(),
    ok        boolean NOT NULL,
    report    jsonb NOT NULL
);

CREATE INDEX canary_runs_node ON canary_runs (node_id, id);

-- Each attempt records the node it ran on and the canary it ran after.
ALTER TABLE attempts
    ADD COLUMN node_id text NOT NULL DEFAULT '',
    ADD COLUMN canary_run_id bigint REFERENCES canary_runs (id);
