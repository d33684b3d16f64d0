-- gpuq schema: every pool's availability over time, shared by all servers,
-- so that a restarted or second server's spot strategy is not blind.
--
-- One row per pool per time bucket. An observation (an offer refresh, a
-- launch that succeeded or found no capacity, a preemption) counts as one
-- tick of the pool being up or down, at most one per tick slot however many
-- servers observe it (last_slot). Within a bucket the row keeps what the
-- spot strategy's PoolHistory needs and can be merged with its neighbours:
-- ticks and up ticks, the runs of capacity that start in it, whether its
-- first and last ticks were up, and the length of the run it ends with.
-- Recent buckets are fine (5 minutes); older ones are merged into coarse
-- ones (an hour) and the oldest dropped, so each pool keeps a bounded number
-- of rows (queue/store PoolHistoryRetention).
CREATE TABLE pool_history (
    pool          text NOT NULL,
    bucket_start  timestamptz NOT NULL,
    width_seconds integer NOT NULL CHECK (width_seconds > 0),
    ticks         integer NOT NULL DEFAULT 0 CHECK (ticks >= 0),
    up_ticks      integer NOT NULL DEFAULT 0 CHECK (up_ticks >= 0 AND up_ticks <= ticks),
    up_runs       integer NOT NULL DEFAULT 0 CHECK (up_runs >= 0),
    first_up      boolean NOT NULL DEFAULT false,
    last_up       boolean NOT NULL DEFAULT false,
    tail_run      integer NOT NULL DEFAULT 0 CHECK (tail_run >= 0 AND tail_run <= ticks),
    last_slot     bigint NOT NULL DEFAULT 0,
    launches      integer NOT NULL DEFAULT 0,
    no_capacity   integer NOT NULL DEFAULT 0,
    preemptions   integer NOT NULL DEFAULT 0,
    price_micros  bigint NOT NULL DEFAULT 0,
    currency      text NOT NULL DEFAULT '',
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pool, bucket_start)
);
