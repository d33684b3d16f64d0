-- name: PoolExhaustionRecord :exec
-- PoolExhaustionRecord leaves a pool alone until a time; a pool already left
-- alone past exhausted_at keeps its first reason and end, as the autoscaler
-- keeps them in memory.
INSERT INTO pool_exhaustions (pool, exhausted_at, until, reason)
VALUES (@pool, @exhausted_at, @until, @reason)
ON CONFLICT (pool) DO UPDATE
SET exhausted_at = EXCLUDED.exhausted_at, until = EXCLUDED.until, reason = EXCLUDED.reason
WHERE pool_exhaustions.until <= EXCLUDED.exhausted_at;

-- name: PoolExhaustionListActive :many
-- PoolExhaustionListActive lists the pools still left alone at a time.
SELECT pool, exhausted_at, until, reason FROM pool_exhaustions
WHERE until > @at
ORDER BY pool;
