-- gpuq schema: the pools the autoscaler leaves alone for their back-off
-- after no capacity or a failed boot, so that a server that takes the lead
-- (a restart, a failover) does not launch into them again at once.
CREATE TABLE pool_exhaustions (
    pool         text PRIMARY KEY,
    exhausted_at timestamptz NOT NULL,
    until        timestamptz NOT NULL CHECK (until >= exhausted_at),
    reason       text NOT NULL
);
