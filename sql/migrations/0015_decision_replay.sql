-- gpuq schema: what each placement was decided from, so that its full
-- explanation can be recomputed on demand while the stored decision stays
-- short (placements.decision holds the compact form: the chosen offer, the
-- ranked plan B and the rejections counted by reason with a few examples).
--
-- offer_snapshots holds the offers a placer decided among, once per offer
-- refresh (its id is the hash of the offers' JSON), shared by every
-- placement made from that refresh. placement_recipes holds the rest of a
-- decision's inputs: the job's requirements as placed, the rules with
-- their budgets charged, the decision time and, for a re-placement, the
-- previous decision and the job's history. Snapshots older than the
-- store's retention are deleted with their recipes; the compact decision
-- stays.
CREATE TABLE offer_snapshots (
    id          text PRIMARY KEY,
    offers      jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX offer_snapshots_created ON offer_snapshots (created_at);

CREATE TABLE placement_recipes (
    job_id      uuid NOT NULL,
    version     integer NOT NULL,
    snapshot    text NOT NULL REFERENCES offer_snapshots (id) ON DELETE CASCADE,
    recipe      jsonb NOT NULL,
    PRIMARY KEY (job_id, version),
    FOREIGN KEY (job_id, version) REFERENCES placements (job_id, version) ON DELETE CASCADE
);

CREATE INDEX placement_recipes_snapshot ON placement_recipes (snapshot);
