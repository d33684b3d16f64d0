// Package migrations holds gpuq's PostgreSQL schema as numbered migrations
// (NNNN_description.sql, embedded) and the runner that applies them once
// each, under an advisory lock so that servers starting together take turns.
// The queries live in sql/queries, one file per table, and sqlc generates
// sql/db from both; `make generate` rewrites it and `make verify` fails when
// it is stale.
package migrations
