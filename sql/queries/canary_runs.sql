-- name: CanaryRunInsert :one
INSERT INTO canary_runs (node_id, ok, report) VALUES (@node_id, @ok, @report)
RETURNING id;
