-- gpuq schema, version 13: the instances the autoscaler rents. A row is
-- written, with its client token, before the provider is asked, so a launch
-- cut off between the provider's answer and its record is found again by
-- that token; every state change is an instance event.

-- instance_state mirrors queue.InstanceState. Terminal states: terminated,
-- preempted, failed.
CREATE TYPE instance_state AS ENUM (
    'requested',   -- recorded; the provider was (or is being) asked
    'pending',     -- the provider rented it; its worker is not up yet
    'ready',       -- its worker is up and pulling
    'draining',    -- being released: its worker finishes or hands back
    'terminated',  -- released by gpuq; no longer billed
    'preempted',   -- reclaimed by the provider, or gone without gpuq's word
    'failed'       -- never came up (no capacity, refused, boot timeout)
);

CREATE TABLE instances (
    -- id is gpuq's id: the boot spec's instance id, the worker's node id.
    id              text PRIMARY KEY,
    provider        text NOT NULL,
    pool            text NOT NULL,
    -- project is the project whose waiting jobs the launch was for; its
    -- bounds count the instance.
    project         text NOT NULL DEFAULT '',
    state           instance_state NOT NULL DEFAULT 'requested',
    -- client_token makes the launch idempotent at the provider.
    client_token    text NOT NULL UNIQUE,
    provider_id     text NOT NULL DEFAULT '',
    slots           integer NOT NULL CHECK (slots > 0),
    -- price_micros per hour in currency, as the offer said; billing is
    -- 'second' or 'hour', the unit the provider rounds billed time up to.
    price_micros    bigint NOT NULL CHECK (price_micros >= 0),
    currency        text NOT NULL,
    billing         text NOT NULL DEFAULT 'second' CHECK (billing IN ('second', 'hour')),
    requested_at    timestamptz NOT NULL DEFAULT now(),
    -- launched_at starts the bill, ended_at stops it.
    launched_at     timestamptz,
    ready_at        timestamptz,
    -- worker_seen_at is the latest sign of life of its worker (a heartbeat,
    -- a claim, a completion).
    worker_seen_at  timestamptz,
    drain_at        timestamptz,
    ended_at        timestamptz,
    reason          text NOT NULL DEFAULT '',
    CONSTRAINT instances_ended_only_when_terminal CHECK (
        (state IN ('terminated', 'preempted', 'failed')) = (ended_at IS NOT NULL)
    )
);

CREATE INDEX instances_live ON instances (pool) WHERE state IN ('requested', 'pending', 'ready', 'draining');
CREATE INDEX instances_requested ON instances (requested_at);

CREATE TABLE instance_events (
    id           bigserial PRIMARY KEY,
    instance_id  text NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    at           timestamptz NOT NULL DEFAULT now(),
    state        instance_state NOT NULL,
    message      text NOT NULL DEFAULT ''
);

CREATE INDEX instance_events_instance ON instance_events (instance_id, id);

-- The autoscaler reads each instance's worker activity from its attempts.
CREATE INDEX attempts_node ON attempts (node_id) WHERE node_id <> '';
