-- name: ProjectEnsureMany :exec
INSERT INTO projects (name) SELECT unnest(@names::text[]) ON CONFLICT (name) DO NOTHING;

-- name: ProjectBudgetLock :exec
-- ProjectBudgetLock takes the transaction's advisory lock on a project's
-- budget: commits that check and reserve against the same project's budgets
-- run one after the other, so each sees the reservations of those before.
SELECT pg_advisory_xact_lock(hashtextextended('gpuq.budget:' || @project::text, 0));

-- name: ProjectBudgetUse :many
-- ProjectBudgetUse returns, for each budget guard, what its project has
-- used in base micros: the spend of its attempts started since the guard's
-- period start, plus what its unfinished jobs (other than those in exclude,
-- which are being placed again) still reserve: their current placement's
-- estimate less what their attempts have accrued, never below zero. Each
-- currency is converted into the base currency at the guard's rate (base
-- micros per unit, rounded down, as policy converts); an amount in a
-- currency the guard has no rate for sets unknown. Spend reads as
-- AttemptSpendByProject does.
WITH g AS (
    SELECT unnest(@guards::int[]) AS guard, unnest(@projects::text[]) AS project,
           unnest(@since::timestamptz[]) AS since
), r AS (
    SELECT unnest(@rate_guards::int[]) AS guard, unnest(@rate_currencies::text[]) AS currency,
           unnest(@rate_micros::bigint[]) AS rate_micros
), sc AS (
    SELECT g.guard, a.currency,
           COALESCE(SUM(a.price_micros * EXTRACT(EPOCH FROM (COALESCE(a.ended_at, a.heartbeat_at) - a.started_at)) / 3600), 0)::bigint AS micros
    FROM g
    JOIN jobs j ON j.project = g.project
    JOIN attempts a ON a.job_id = j.id AND a.started_at >= g.since AND a.currency <> ''
    GROUP BY g.guard, a.currency
), s AS (
    SELECT sc.guard, bool_or(r.currency IS NULL) AS unknown,
           COALESCE(SUM(div(sc.micros::numeric * r.rate_micros, 1000000)), 0) AS micros
    FROM sc
    LEFT JOIN r ON r.guard = sc.guard AND r.currency = sc.currency
    GROUP BY sc.guard
), u AS (
    SELECT g.guard, j.id, p.estimate_micros, p.estimate_currency
    FROM g
    JOIN jobs j ON j.project = g.project AND j.finalized_at IS NULL AND NOT (j.id = ANY(@exclude::uuid[]))
    JOIN placements p ON p.job_id = j.id AND p.version = j.placement_version AND p.estimate_micros > 0
), ua AS (
    SELECT u.guard, u.id, a.currency,
           COALESCE(SUM(a.price_micros * EXTRACT(EPOCH FROM (COALESCE(a.ended_at, a.heartbeat_at) - a.started_at)) / 3600), 0)::bigint AS micros
    FROM u
    JOIN attempts a ON a.job_id = u.id AND a.currency <> ''
    GROUP BY u.guard, u.id, a.currency
), uj AS (
    SELECT u.guard, u.id,
           bool_or(re.currency IS NULL) OR bool_or(ua.currency IS NOT NULL AND ra.currency IS NULL) AS unknown,
           GREATEST(MAX(div(u.estimate_micros::numeric * re.rate_micros, 1000000))
                    - COALESCE(SUM(div(ua.micros::numeric * ra.rate_micros, 1000000)), 0), 0) AS micros
    FROM u
    LEFT JOIN r re ON re.guard = u.guard AND re.currency = u.estimate_currency
    LEFT JOIN ua ON ua.guard = u.guard AND ua.id = u.id
    LEFT JOIN r ra ON ra.guard = u.guard AND ra.currency = ua.currency
    GROUP BY u.guard, u.id
), rv AS (
    SELECT uj.guard, bool_or(uj.unknown) AS unknown, COALESCE(SUM(uj.micros), 0) AS micros
    FROM uj
    GROUP BY uj.guard
)
SELECT g.guard::int AS guard,
       (COALESCE(s.unknown, false) OR COALESCE(rv.unknown, false))::bool AS unknown,
       (COALESCE(s.micros, 0) + COALESCE(rv.micros, 0))::bigint AS used_micros
FROM g
LEFT JOIN s ON s.guard = g.guard
LEFT JOIN rv ON rv.guard = g.guard
ORDER BY g.guard;

-- name: ProjectReservedByCurrency :many
-- ProjectReservedByCurrency is what a project's unfinished jobs still
-- reserve, per estimate currency: each job's current placement's estimate
-- less what its attempts have accrued in that currency, never below zero.
SELECT p.estimate_currency AS currency,
       COALESCE(SUM(GREATEST(p.estimate_micros - COALESCE((
           SELECT SUM(a.price_micros * EXTRACT(EPOCH FROM (COALESCE(a.ended_at, a.heartbeat_at) - a.started_at)) / 3600)
           FROM attempts a WHERE a.job_id = j.id AND a.currency = p.estimate_currency), 0), 0)), 0)::bigint AS micros
FROM jobs j
JOIN placements p ON p.job_id = j.id AND p.version = j.placement_version AND p.estimate_micros > 0
WHERE j.project = @project AND j.finalized_at IS NULL
GROUP BY p.estimate_currency
ORDER BY p.estimate_currency;

-- name: ProjectStoredBytes :one
-- ProjectStoredBytes is what a project keeps in the archive stores: its
-- recorded checkpoints and results, and the pruned checkpoints not yet
-- deleted.
SELECT (COALESCE((SELECT SUM(c.bytes) FROM checkpoints c JOIN jobs j ON j.id = c.job_id WHERE j.project = @project), 0)
      + COALESCE((SELECT SUM(r.bytes) FROM results r JOIN jobs j ON j.id = r.job_id WHERE j.project = @project), 0)
      + COALESCE((SELECT SUM(g.bytes) FROM checkpoint_garbage g WHERE g.project = @project), 0))::bigint AS bytes;

-- name: JobProjectQuota :one
-- JobProjectQuota is the project of a job and the stored-bytes quota an
-- admin set for it, if any.
SELECT j.project, q.stored_bytes AS quota_bytes
FROM jobs j LEFT JOIN project_quotas q ON q.project = j.project
WHERE j.id = @id;

-- name: ProjectQuotaGet :one
SELECT * FROM project_quotas WHERE project = @project;

-- name: ProjectQuotaSet :one
INSERT INTO project_quotas (project, stored_bytes, set_by) VALUES (@project, @stored_bytes, @set_by)
ON CONFLICT (project) DO UPDATE SET stored_bytes = EXCLUDED.stored_bytes, set_by = EXCLUDED.set_by, set_at = now()
RETURNING *;

-- name: ProjectQuotaDelete :execrows
DELETE FROM project_quotas WHERE project = @project;

-- name: ProjectSecretSet :one
-- ProjectSecretSet stores a project's secret, or replaces its value. A new
-- name is stored only while the project holds fewer than @max_secrets (no
-- row comes back otherwise): a bound on what a project keeps, which sets of
-- new names at the same moment may pass by as many as they are.
INSERT INTO project_secrets (project, name, value, sealed, set_by)
SELECT @project, @name, @value, @sealed, @set_by
WHERE EXISTS (SELECT 1 FROM project_secrets WHERE project = @project AND name = @name)
   OR (SELECT count(*) FROM project_secrets WHERE project = @project) < @max_secrets::bigint
ON CONFLICT (project, name) DO UPDATE SET value = EXCLUDED.value, sealed = EXCLUDED.sealed, set_by = EXCLUDED.set_by, set_at = now()
RETURNING project, name, set_by, set_at;

-- name: ProjectSecretList :many
-- ProjectSecretList lists a project's secrets by name, without values.
SELECT project, name, set_by, set_at FROM project_secrets WHERE project = @project ORDER BY name;

-- name: ProjectSecretDelete :execrows
DELETE FROM project_secrets WHERE project = @project AND name = @name;

-- name: ProjectSecretValues :many
-- ProjectSecretValues reads the values of a project's secrets of those
-- names that are set.
SELECT name, value, sealed FROM project_secrets WHERE project = @project AND name = ANY(@names::text[]);
