-- name: ProjectEnsureMany :exec
INSERT INTO projects (name) SELECT unnest(@names::text[]) ON CONFLICT (name) DO NOTHING;
