// Package sql holds gpuq's PostgreSQL schema: the embedded migrations and the
// runner that applies them. The queries live in sql/queries, one file per
// table, and sqlc generates the typed code in sql/db; `make generate` rewrites
// it and `make verify` fails when it is stale.
package sql
