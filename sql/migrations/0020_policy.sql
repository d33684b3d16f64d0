-- gpuq schema: the placement policy, versioned. Each row is one whole
-- rules document as an admin set it; the highest version is the policy in
-- effect on every server. While the table is empty the servers' config
-- file policy is in effect. Versions are never changed or deleted, so the
-- history answers "which rules placed this job".
CREATE TABLE policy_versions (
    version  bigint PRIMARY KEY CHECK (version > 0),
    -- rules is the document in the policy file's shape (the keys of
    -- README "Policy file"), checked by the server before it is stored.
    rules    jsonb NOT NULL CHECK (jsonb_typeof(rules) = 'object'),
    -- set_by is the id of the API token that set it, or "cli" for
    -- `gpuq policy set` on the control-plane host.
    set_by   text NOT NULL CHECK (set_by <> ''),
    set_at   timestamptz NOT NULL DEFAULT now(),
    comment  text NOT NULL DEFAULT '' CHECK (length(comment) <= 1000)
);
