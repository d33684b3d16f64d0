-- name: TokenInsert :one
INSERT INTO tokens (id, prefix, hash, name, projects, role, expires_at)
VALUES (@id, @prefix, @hash, @name, @projects::text[], @role, sqlc.narg('expires_at'))
RETURNING *;

-- name: TokenGetByPrefix :one
SELECT * FROM tokens WHERE prefix = @prefix;

-- name: TokenList :many
-- TokenList returns the tokens that share a project with @projects (all
-- tokens when @every), newest first.
SELECT * FROM tokens
WHERE @every::boolean OR projects && @projects::text[]
ORDER BY created_at DESC, id;

-- name: TokenRevoke :execrows
-- TokenRevoke revokes a token that shares a project with @projects (any
-- token when @every); revoking twice keeps the first time.
UPDATE tokens SET revoked_at = COALESCE(revoked_at, now())
WHERE id = @id AND (@every::boolean OR projects <@ @projects::text[]);

-- name: TokenTouchMany :exec
-- TokenTouchMany records that tokens were used at @at, never moving back.
UPDATE tokens SET last_used_at = @at::timestamptz
WHERE id = ANY(@ids::uuid[]) AND (last_used_at IS NULL OR last_used_at < @at::timestamptz);
