-- gpuq schema: the lengths of a pool's runs of capacity and of none, which
-- the spot strategy's look-ahead models its outages from.
--
-- head_run is the length in ticks of the run a bucket starts with (all its
-- ticks when it holds one run); with tail_run it lets neighbouring buckets
-- be merged exactly. up_spells and down_spells count the runs that begin
-- and end inside the bucket by their length in spells (the strategy's model
-- tick, 10 minutes by default: queue/store PoolHistoryRetention.Spell):
-- [n] those of n spells, rounded and at least one, the last those of 12 or
-- more. A bucket written before this migration gets head_run as every tick
-- before its last run, exact when it holds two runs, and no spells.
ALTER TABLE pool_history
    ADD COLUMN head_run integer NOT NULL DEFAULT 0 CHECK (head_run >= 0 AND head_run <= ticks),
    ADD COLUMN up_spells integer[] NOT NULL DEFAULT '{0,0,0,0,0,0,0,0,0,0,0,0}' CHECK (cardinality(up_spells) = 12),
    ADD COLUMN down_spells integer[] NOT NULL DEFAULT '{0,0,0,0,0,0,0,0,0,0,0,0}' CHECK (cardinality(down_spells) = 12);

UPDATE pool_history SET head_run = CASE WHEN tail_run = ticks THEN ticks ELSE ticks - tail_run END;

-- pool_history_spell returns spells with one more run of run ticks counted,
-- in spells of unit ticks.
CREATE FUNCTION pool_history_spell(spells integer[], run integer, unit integer) RETURNS integer[]
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT spells[1:k - 1] || (spells[k] + 1) || spells[k + 1:12]
    FROM (SELECT greatest(1, least(12, (run + greatest(unit, 1) / 2) / greatest(unit, 1))) AS k) AS s
$$;
