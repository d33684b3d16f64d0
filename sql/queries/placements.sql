-- name: PlacementInsert :exec
INSERT INTO placements (job_id, version, pool, region, residency, countries, price_micros, currency, decision)
VALUES (@job_id, @version, @pool, @region, @residency, @countries, @price_micros, @currency, @decision)
ON CONFLICT (job_id, version) DO NOTHING;

-- name: PlacementLatest :one
SELECT * FROM placements WHERE job_id = @job_id ORDER BY version DESC LIMIT 1;
