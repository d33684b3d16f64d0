package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// A checkpoint that would take its project past its stored-bytes quota is
// refused with an error naming the project, the bytes and the quota's key,
// and nothing is recorded; another project's quota is its own.
func TestACheckpointPastTheProjectQuotaIsRefusedNamingTheQuota(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	s.Storage = queue.Storage{ProjectQuotaBytes: 1000, ProjectQuotas: map[string]int64{"big": 1 << 20}}
	id := placedJob(t, s)
	if _, err := claim(t, s, id, time.Minute); err != nil {
		t.Fatal(err)
	}
	rec := func(uri string, bytes int64) error {
		_, err := s.RecordCheckpoint(ctx, id, 1, queue.ArchiveRecord{Bytes: bytes, SHA256: "x", Region: "r", StoreURI: uri})
		return err
	}
	if err := rec("nats-os://b/1", 600); err != nil {
		t.Fatal(err)
	}
	err := rec("nats-os://b/2", 600)
	if !errors.Is(err, queue.ErrQuotaExceeded) || !strings.Contains(err.Error(), "storage.project_quotas.default") || !strings.Contains(err.Error(), "600 bytes") {
		t.Fatalf("a checkpoint past the quota must be refused naming it, got %v", err)
	}
	cps, err := s.Checkpoints(ctx, id)
	if err != nil || len(cps) != 1 {
		t.Fatalf("the refused checkpoint must not be recorded: %+v %v", cps, err)
	}
	if n, err := s.StoredBytes(ctx, "default"); err != nil || n != 600 {
		t.Fatalf("stored bytes of default = %d, %v; want 600", n, err)
	}
	if err := rec("nats-os://b/3", 400); err != nil {
		t.Fatalf("a checkpoint within the quota: %v", err)
	}
}
