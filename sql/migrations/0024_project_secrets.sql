-- gpuq schema: values a project's jobs name in their spec's secrets (an API
-- key, a token) and receive as environment variables of the same name. Only
-- the control plane reads this table; a value leaves it only for the worker
-- running the latest attempt of a job that names it.
--
-- sealed: value is the base64 of a nonce and the AES-256-GCM sealing of the
-- secret's value with the servers' secrets.key_file, bound to its project
-- and name; else value is the secret's value itself (no key configured).
CREATE TABLE project_secrets (
    project text NOT NULL CHECK (project <> ''),
    name    text NOT NULL CHECK (name ~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$'),
    value   text NOT NULL CHECK (value <> ''),
    sealed  boolean NOT NULL,
    set_by  text NOT NULL CHECK (set_by <> ''),
    set_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project, name)
);
