-- name: PoolHistoryObserve :exec
-- PoolHistoryObserve counts one tick of a pool being up or down in its
-- bucket, unless a tick of the same slot (or a later one) was counted
-- already, by this server or another; the price is the latest seen. A run
-- that the tick ends and that began inside the bucket is counted in the
-- bucket's spells, in spells of spell_ticks ticks (queue.PoolBucket.Merge
-- is the same rule).
INSERT INTO pool_history AS ph (pool, bucket_start, width_seconds, ticks, up_ticks, up_runs,
                                first_up, last_up, tail_run, head_run, last_slot, price_micros, currency)
VALUES (@pool, @bucket_start, @width_seconds, 1,
        CASE WHEN @up::boolean THEN 1 ELSE 0 END,
        CASE WHEN @up::boolean THEN 1 ELSE 0 END,
        @up::boolean, @up::boolean, 1, 1, @slot, @price_micros, @currency)
ON CONFLICT (pool, bucket_start) DO UPDATE
SET ticks = ph.ticks + 1,
    head_run = CASE WHEN ph.ticks = 0 THEN 1
                    WHEN ph.tail_run = ph.ticks AND ph.last_up = EXCLUDED.last_up THEN ph.head_run + 1
                    ELSE ph.head_run END,
    up_spells = CASE WHEN ph.ticks > 0 AND ph.last_up AND NOT EXCLUDED.last_up AND ph.tail_run < ph.ticks
                     THEN pool_history_spell(ph.up_spells, ph.tail_run, @spell_ticks::integer)
                     ELSE ph.up_spells END,
    down_spells = CASE WHEN ph.ticks > 0 AND NOT ph.last_up AND EXCLUDED.last_up AND ph.tail_run < ph.ticks
                       THEN pool_history_spell(ph.down_spells, ph.tail_run, @spell_ticks::integer)
                       ELSE ph.down_spells END,
    up_ticks = ph.up_ticks + EXCLUDED.up_ticks,
    up_runs = ph.up_runs + CASE WHEN EXCLUDED.last_up AND (ph.ticks = 0 OR NOT ph.last_up) THEN 1 ELSE 0 END,
    first_up = CASE WHEN ph.ticks = 0 THEN EXCLUDED.first_up ELSE ph.first_up END,
    tail_run = CASE WHEN ph.ticks > 0 AND ph.last_up = EXCLUDED.last_up THEN ph.tail_run + 1 ELSE 1 END,
    last_up = EXCLUDED.last_up,
    last_slot = EXCLUDED.last_slot,
    price_micros = CASE WHEN EXCLUDED.currency <> '' THEN EXCLUDED.price_micros ELSE ph.price_micros END,
    currency = CASE WHEN EXCLUDED.currency <> '' THEN EXCLUDED.currency ELSE ph.currency END,
    updated_at = now()
WHERE ph.ticks = 0 OR ph.last_slot < EXCLUDED.last_slot;

-- name: PoolHistoryCount :exec
-- PoolHistoryCount adds launch, no-capacity and preemption counts to a
-- pool's bucket without counting a tick.
INSERT INTO pool_history AS ph (pool, bucket_start, width_seconds, launches, no_capacity, preemptions)
VALUES (@pool, @bucket_start, @width_seconds, @launches, @no_capacity, @preemptions)
ON CONFLICT (pool, bucket_start) DO UPDATE
SET launches = ph.launches + EXCLUDED.launches,
    no_capacity = ph.no_capacity + EXCLUDED.no_capacity,
    preemptions = ph.preemptions + EXCLUDED.preemptions,
    updated_at = now();

-- name: PoolHistoryList :many
-- PoolHistoryList returns the buckets of every pool (or of one) from a time
-- on, oldest first.
SELECT * FROM pool_history
WHERE bucket_start >= @since
  AND (sqlc.narg('pool')::text IS NULL OR pool = sqlc.narg('pool')::text)
ORDER BY pool, bucket_start;

-- name: PoolHistoryPools :many
-- PoolHistoryPools lists the pools with buckets older than a time.
SELECT DISTINCT pool FROM pool_history WHERE bucket_start < @before ORDER BY pool;

-- name: PoolHistoryLockPool :one
-- PoolHistoryLockPool takes the pool's compaction lock for the transaction,
-- or reports that another server holds it.
SELECT pg_try_advisory_xact_lock(hashtext('gpuq.pool_history.' || @pool::text)) AS locked;

-- name: PoolHistoryOlder :many
-- PoolHistoryOlder returns a pool's buckets older than a time, oldest first.
SELECT * FROM pool_history
WHERE pool = @pool AND bucket_start < @before
ORDER BY bucket_start, width_seconds DESC;

-- name: PoolHistoryDeleteOlder :exec
DELETE FROM pool_history WHERE pool = @pool AND bucket_start < @before;

-- name: PoolHistoryInsert :exec
-- PoolHistoryInsert writes a merged bucket.
INSERT INTO pool_history (pool, bucket_start, width_seconds, ticks, up_ticks, up_runs, first_up, last_up,
                          tail_run, head_run, up_spells, down_spells, last_slot, launches, no_capacity, preemptions,
                          price_micros, currency)
VALUES (@pool, @bucket_start, @width_seconds, @ticks, @up_ticks, @up_runs, @first_up, @last_up,
        @tail_run, @head_run, @up_spells, @down_spells, @last_slot, @launches, @no_capacity, @preemptions,
        @price_micros, @currency);

-- name: PoolHistoryTrim :exec
-- PoolHistoryTrim keeps a pool's newest skip+1 rows only.
DELETE FROM pool_history d
WHERE d.pool = @pool AND d.bucket_start < COALESCE((
    SELECT k.bucket_start FROM pool_history k
    WHERE k.pool = @pool ORDER BY k.bucket_start DESC
    OFFSET @skip LIMIT 1), '-infinity');

-- name: PoolHistoryCountPreemption :exec
-- PoolHistoryCountPreemption counts a preempted attempt (a hand-back after a
-- notice, or a lost instance) against its pool.
INSERT INTO pool_history AS ph (pool, bucket_start, width_seconds, preemptions)
SELECT a.pool, @bucket_start, @width_seconds, 1
FROM attempts a WHERE a.job_id = @job_id AND a.attempt = @attempt
ON CONFLICT (pool, bucket_start) DO UPDATE
SET preemptions = ph.preemptions + 1, updated_at = now();

-- name: PoolHistoryDeleteRange :exec
DELETE FROM pool_history WHERE pool = @pool AND bucket_start >= @from_time AND bucket_start < @to_time;
