-- name: PlacementLatest :one
SELECT * FROM placements WHERE job_id = @job_id ORDER BY version DESC LIMIT 1;
