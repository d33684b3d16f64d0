-- gpuq schema, version 3: what each attempt costs, so that spend is known as
-- it accrues. A placement records the chosen offer's price; each attempt
-- copies the price of the placement it ran under, and its spend is that
-- price over the time from its start to its last heartbeat (or its end).
ALTER TABLE placements
    ADD COLUMN price_micros bigint NOT NULL DEFAULT 0,
    ADD COLUMN currency text NOT NULL DEFAULT '';

ALTER TABLE attempts
    ADD COLUMN price_micros bigint NOT NULL DEFAULT 0,
    ADD COLUMN currency text NOT NULL DEFAULT '';

CREATE INDEX attempts_started ON attempts (started_at);
