-- name: NodeRecordCanary :one
-- NodeRecordCanary counts one canary run against a node, creating the node
-- on its first run; a quarantine, once set, stays.
INSERT INTO nodes (id, pool, host, last_canary_at, last_canary_ok, last_canary_summary,
                   canary_runs, canary_failures, consecutive_failures, quarantined_at, quarantine_reason)
VALUES (@id, @pool, @host, now(), @ok, @summary, 1,
        CASE WHEN @ok::boolean THEN 0 ELSE 1 END,
        CASE WHEN @ok::boolean THEN 0 ELSE 1 END,
        CASE WHEN @quarantine::boolean THEN now() END,
        CASE WHEN @quarantine::boolean THEN @reason::text ELSE '' END)
ON CONFLICT (id) DO UPDATE
SET pool = EXCLUDED.pool,
    host = EXCLUDED.host,
    last_canary_at = now(),
    last_canary_ok = EXCLUDED.last_canary_ok,
    last_canary_summary = EXCLUDED.last_canary_summary,
    canary_runs = nodes.canary_runs + 1,
    canary_failures = nodes.canary_failures + EXCLUDED.canary_failures,
    consecutive_failures = CASE WHEN @ok::boolean THEN 0 ELSE nodes.consecutive_failures + 1 END,
    quarantined_at = COALESCE(nodes.quarantined_at, EXCLUDED.quarantined_at),
    quarantine_reason = CASE WHEN nodes.quarantined_at IS NOT NULL THEN nodes.quarantine_reason ELSE EXCLUDED.quarantine_reason END
RETURNING *;

-- name: NodeGet :one
SELECT * FROM nodes WHERE id = @id;

-- name: NodeList :many
SELECT * FROM nodes
WHERE (sqlc.narg('pool')::text IS NULL OR pool = sqlc.narg('pool')::text)
ORDER BY pool, id;
