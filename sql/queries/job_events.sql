-- name: JobEventInsert :exec
INSERT INTO job_events (job_id, state, attempt, message)
VALUES (@job_id, @state, @attempt, @message);

-- name: JobEventListByJob :many
SELECT * FROM job_events WHERE job_id = @job_id ORDER BY id;
