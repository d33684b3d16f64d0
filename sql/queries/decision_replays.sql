-- name: OfferSnapshotInsert :exec
-- OfferSnapshotInsert stores the offers of one refresh; a snapshot stored
-- before (same hash) is kept as it is.
INSERT INTO offer_snapshots (id, offers) VALUES (@id, @offers::jsonb)
ON CONFLICT (id) DO NOTHING;

-- name: OfferSnapshotsPrune :execrows
-- OfferSnapshotsPrune deletes the snapshots (and with them the recipes that
-- replay on them) stored before a time.
DELETE FROM offer_snapshots WHERE created_at < @before;

-- name: PlacementRecipeGet :one
SELECT r.recipe, s.offers
FROM placement_recipes r JOIN offer_snapshots s ON s.id = r.snapshot
WHERE r.job_id = @job_id AND r.version = @version;
