-- Leadership of a deployment's singleton loops (autoscaler, reaper): a
-- session advisory lock held on a dedicated connection, released by
-- PostgreSQL when the holder's session ends, however it ends. The two-key
-- form keeps these locks apart from the migration lock's one-key space.

-- name: LeaderTryLock :one
-- LeaderTryLock takes the role's lock for the session, or reports that
-- another session holds it.
SELECT pg_try_advisory_lock(1735423345, hashtext('gpuq.leader.' || @role::text)) AS locked;

-- name: LeaderUnlock :one
SELECT pg_advisory_unlock(1735423345, hashtext('gpuq.leader.' || @role::text)) AS unlocked;
