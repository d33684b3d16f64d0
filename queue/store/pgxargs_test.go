package store

import (
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/gpuq/gpuq/sql/db"
)

func TestPgxArgsPassesTheSlicesPqArrayWraps(t *testing.T) {
	id := uuid.New()
	at := time.Unix(1, 0)
	states := []db.InstanceState{db.InstanceStateRequested}
	args := nativeArrays([]any{
		pq.Array([]string{"a"}), pq.Array([]int64{1}), pq.Array([]int32{2}), pq.Array([]bool{true}),
		pq.Array([]float64{0.5}), pq.Array([][]byte{{1}}), pq.Array([]uuid.UUID{id}), pq.Array([]time.Time{at}),
		id, "text", int32(3), pq.Array(states),
	})
	want := []any{
		[]string{"a"}, []int64{1}, []int32{2}, []bool{true},
		[]float64{0.5}, [][]byte{{1}}, [][16]byte{id}, []time.Time{at},
		[16]byte(id), "text", int32(3), pq.Array(states),
	}
	if !reflect.DeepEqual(args, want) {
		t.Fatalf("nativeArrays:\n got %#v\nwant %#v", args, want)
	}
}
