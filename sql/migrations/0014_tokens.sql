-- gpuq schema, version 14: API tokens. A token is shown once when it is
-- created; only its SHA-256 is kept, found by its public prefix. A token is
-- scoped to projects and a role: read (see jobs), submit (also submit and
-- cancel), admin (also manage tokens).
CREATE TYPE token_role AS ENUM ('read', 'submit', 'admin');

CREATE TABLE tokens (
    id            uuid PRIMARY KEY,
    -- prefix is the token's public lookup part (gpuq_<prefix>_<secret>).
    prefix        text NOT NULL UNIQUE,
    -- hash is the SHA-256 of the whole token.
    hash          bytea NOT NULL,
    name          text NOT NULL DEFAULT '',
    projects      text[] NOT NULL,
    role          token_role NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    revoked_at    timestamptz,
    last_used_at  timestamptz,
    CONSTRAINT tokens_have_projects CHECK (cardinality(projects) > 0)
);
