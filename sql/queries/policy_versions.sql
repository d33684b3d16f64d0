-- name: PolicyVersionLatest :one
-- PolicyVersionLatest is the policy in effect.
SELECT * FROM policy_versions ORDER BY version DESC LIMIT 1;

-- name: PolicyVersionCurrent :one
-- PolicyVersionCurrent is the version number in effect, 0 when there is
-- none: what every server polls, one index lookup.
SELECT COALESCE(max(version), 0)::bigint FROM policy_versions;

-- name: PolicyVersionInsert :one
-- PolicyVersionInsert adds the next version; when @only_if it does so only if
-- the version in effect is @expected (0: none yet), and returns no row
-- otherwise. Two writers racing for one number meet the primary key.
INSERT INTO policy_versions (version, rules, set_by, comment)
SELECT cur.v + 1, @rules, @set_by, @comment
FROM (SELECT COALESCE(max(version), 0)::bigint AS v FROM policy_versions) cur
WHERE NOT @only_if::boolean OR cur.v = @expected::bigint
RETURNING *;

-- name: PolicyVersionList :many
-- PolicyVersionList is the history, newest first, with the name of the
-- token that set each version ('' for cli or a token no longer stored).
SELECT sqlc.embed(policy_versions), COALESCE(tokens.name, '')::text AS set_by_name
FROM policy_versions
LEFT JOIN tokens ON tokens.id::text = policy_versions.set_by
ORDER BY policy_versions.version DESC LIMIT @max_rows;
