// Package store is gpuq's PostgreSQL system of record: the only importer of
// the generated sql/db queries and the only code that opens PostgreSQL. It
// converts generated rows into the queue vocabulary in one place and fences
// every worker write by attempt. Events are announced after their transaction
// commits, through the EventSink the caller provides.
package store
