-- gpuq schema: stored-bytes quotas an admin set for a project through the
-- HTTP API. A row takes the place of the config file's quota for its project
-- (storage.project_quotas, storage.project_quota); stored_bytes 0 is no
-- quota. Without a row the config file's quota holds.
CREATE TABLE project_quotas (
    project      text PRIMARY KEY CHECK (project <> ''),
    stored_bytes bigint NOT NULL CHECK (stored_bytes >= 0),
    set_by       text NOT NULL CHECK (set_by <> ''),
    set_at       timestamptz NOT NULL DEFAULT now()
);
