-- name: ProjectEnsureMany :exec
INSERT INTO projects (name) SELECT unnest(@names::text[]) ON CONFLICT (name) DO NOTHING;

-- name: ProjectBudgetOverruns :many
-- ProjectBudgetOverruns re-checks budget guards against the spend recorded
-- now and returns the guards that fail: those whose project's attempts
-- started since the guard's period start have cost, each currency converted
-- into the base currency at the guard's rate (base micros per unit, rounded
-- down, as policy converts), more than the guard's limit less the cost of
-- the placement it guards. Spend in a currency the guard has no rate for
-- fails the guard. It reads spend as AttemptSpendByProject does.
WITH g AS (
    SELECT unnest(@guards::int[]) AS guard, unnest(@projects::text[]) AS project,
           unnest(@since::timestamptz[]) AS since, unnest(@limit_micros::bigint[]) AS limit_micros,
           unnest(@cost_micros::bigint[]) AS cost_micros
), r AS (
    SELECT unnest(@rate_guards::int[]) AS guard, unnest(@rate_currencies::text[]) AS currency,
           unnest(@rate_micros::bigint[]) AS rate_micros
), s AS (
    SELECT g.guard, a.currency,
           COALESCE(SUM(a.price_micros * EXTRACT(EPOCH FROM (COALESCE(a.ended_at, a.heartbeat_at) - a.started_at)) / 3600), 0)::bigint AS micros
    FROM g
    JOIN jobs j ON j.project = g.project
    JOIN attempts a ON a.job_id = j.id AND a.started_at >= g.since AND a.currency <> ''
    GROUP BY g.guard, a.currency
)
SELECT g.guard::int AS guard
FROM g
LEFT JOIN s ON s.guard = g.guard
LEFT JOIN r ON r.guard = s.guard AND r.currency = s.currency
GROUP BY g.guard, g.limit_micros, g.cost_micros
HAVING bool_or(s.currency IS NOT NULL AND r.currency IS NULL)
    OR g.cost_micros + COALESCE(SUM(div(s.micros::numeric * r.rate_micros, 1000000)), 0) > g.limit_micros
ORDER BY g.guard;
