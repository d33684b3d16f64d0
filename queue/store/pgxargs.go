package store

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/lib/pq"

	"github.com/gpuq/gpuq/sql/db"
)

// pgxArgs hands pgx the slices that sqlc's generated code wraps in pq.Array.
// pgx cannot send lib/pq's array types in its binary format: for each such
// argument it formats the array as text, fails to encode that, builds an
// error, parses the text back and encodes the result, which made argument
// encoding the costliest part of the batch statements. Given the slices
// themselves it encodes each array once.
type pgxArgs struct{ db.DBTX }

func (d pgxArgs) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return d.DBTX.ExecContext(ctx, query, nativeArrays(args)...)
}

func (d pgxArgs) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if keptPrepared(query) {
		return d.DBTX.QueryContext(ctx, query, append([]any{pgx.QueryExecModeCacheStatement}, nativeArrays(args)...)...)
	}
	return d.DBTX.QueryContext(ctx, query, nativeArrays(args)...)
}

// keptPrepared tells the statements that run prepared on every connection,
// so that each is parsed and analysed once per connection, and planned once
// when PostgreSQL finds its generic plan no dearer than planning each call
// (plan_cache_mode auto). JobInsertPlacedMany is one: the scheduler runs it
// for every batch of submissions, and it reads no table but through the
// unique indexes that its conflicts are checked on, so its plan does not
// depend on what the tables hold; planning it took about 0.4 ms, which at
// 200 submissions a second was a fifth of the time from a submission to its
// placement. (The claim, success and heartbeat statements, which look rows
// up, run on connections of their own: see openHot.)
func keptPrepared(query string) bool {
	return strings.HasPrefix(query, "-- name: JobInsertPlacedMany ")
}

func (d pgxArgs) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return d.DBTX.QueryRowContext(ctx, query, nativeArrays(args)...)
}

// nativeArrays replaces, in place, each pq.Array argument that pgx can
// encode by the slice it wraps, and each UUID by its bytes (pgx would
// otherwise take its text form through the same detour).
func nativeArrays(args []any) []any {
	for i, a := range args {
		switch v := a.(type) {
		case *pq.StringArray:
			args[i] = []string(*v)
		case *pq.Int64Array:
			args[i] = []int64(*v)
		case *pq.Int32Array:
			args[i] = []int32(*v)
		case *pq.BoolArray:
			args[i] = []bool(*v)
		case *pq.Float64Array:
			args[i] = []float64(*v)
		case *pq.ByteaArray:
			args[i] = [][]byte(*v)
		case pq.GenericArray:
			// Slices of types pgx knows; an enum's slice stays wrapped
			// (pgx knows no enum type of the schema).
			switch a := v.A.(type) {
			case []uuid.UUID:
				args[i] = uuidBytes(a)
			case []time.Time:
				args[i] = a
			}
		case uuid.UUID:
			args[i] = [16]byte(v)
		}
	}
	return args
}

func uuidBytes(ids []uuid.UUID) [][16]byte {
	out := make([][16]byte, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}
