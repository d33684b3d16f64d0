package control_test

import (
	"context"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/sql/pgtest"
)

func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	removeGpuqBinary()
	os.Exit(code)
}

func mustSpec(t *testing.T, yaml string) *queue.Spec {
	t.Helper()
	s, err := queue.ParseSpec([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// placedJob records a job and its first placement, ready to be claimed.
func placedJob(t *testing.T, s *store.Store) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id := uuid.New()
	if _, err := s.RecordJobs(ctx, []queue.NewJob{{ID: id, Spec: mustSpec(t, "command: [/bin/true]")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordPlacements(ctx, []queue.PlacedJob{{JobID: id, Placement: queue.Placement{Version: 1, Pool: "p", Region: "r"}}}); err != nil {
		t.Fatal(err)
	}
	return id
}
