-- name: ProjectEnsure :exec
INSERT INTO projects (name) VALUES (@name) ON CONFLICT (name) DO NOTHING;
