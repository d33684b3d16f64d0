-- gpuq schema: a job whose spec asks for a notification (spec.notify) has
-- its end posted to a webhook by the control plane. An end waits to be
-- notified while jobs.notified_at differs from jobs.finalized_at; the
-- notifier sets it to the end's finalized_at once the end is delivered, not
-- asked for (spec.notify.when) or given up on, so that a job retried and
-- ended again is notified again. The partial index holds only the ends
-- waiting: a job without spec.notify costs the predicate's check on a write.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS notified_at timestamptz;

CREATE INDEX IF NOT EXISTS jobs_notify_due ON jobs (finalized_at)
  WHERE spec->'notify' IS NOT NULL AND finalized_at IS NOT NULL AND notified_at IS DISTINCT FROM finalized_at;

-- Each end's delivery: its tries, the last answer and, once it is over,
-- whether it was delivered or given up on.
CREATE TABLE IF NOT EXISTS job_notifications (
    job_id       uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    finalized_at timestamptz NOT NULL,
    state        job_state   NOT NULL,
    tries        int         NOT NULL DEFAULT 0,
    next_at      timestamptz,
    last_at      timestamptz,
    http_status  int         NOT NULL DEFAULT 0,
    error        text        NOT NULL DEFAULT '',
    outcome      text        NOT NULL DEFAULT 'pending' CHECK (outcome IN ('pending', 'delivered', 'failed')),
    PRIMARY KEY (job_id, finalized_at)
);
