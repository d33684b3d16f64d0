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
	id := runningJob(t, s)
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

// A quota an admin set for a project takes the place of the config file's
// at the next checkpoint, tighter or looser (0: none), and clearing it
// brings the config file's back.
func TestAQuotaAnAdminSetReplacesTheConfigFilesForItsProject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	s.Storage = queue.Storage{ProjectQuotaBytes: 1000}
	id := runningJob(t, s)
	seq := 0
	rec := func(bytes int64) error {
		seq++
		_, err := s.RecordCheckpoint(ctx, id, 1, queue.ArchiveRecord{Bytes: bytes, SHA256: "x", Region: "r", StoreURI: "nats-os://b/" + strings.Repeat("c", seq)})
		return err
	}
	if q, err := s.ProjectQuota(ctx, "default"); err != nil || q.Bytes != 1000 || q.Source != "config" || q.Stored != 0 {
		t.Fatalf("quota before any is set: %+v %v", q, err)
	}
	if err := s.SetProjectQuota(ctx, "default", 500, "tok-1"); err != nil {
		t.Fatal(err)
	}
	err := rec(600)
	if !errors.Is(err, queue.ErrQuotaExceeded) || !strings.Contains(err.Error(), "quota of 500 bytes (PUT /v1/projects/default/quota)") {
		t.Fatalf("a checkpoint past the quota an admin set must be refused naming it, got %v", err)
	}
	if err := s.SetProjectQuota(ctx, "default", 0, "tok-1"); err != nil {
		t.Fatal(err)
	}
	if err := rec(2000); err != nil {
		t.Fatalf("quota 0 set by an admin is no quota, even over the config file's: %v", err)
	}
	if q, err := s.ProjectQuota(ctx, "default"); err != nil || q.Bytes != 0 || q.Source != "admin" || q.SetBy != "tok-1" || q.SetAt == nil || q.Stored != 2000 {
		t.Fatalf("quota set by an admin: %+v %v", q, err)
	}
	if err := s.ClearProjectQuota(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	if err := rec(1); !errors.Is(err, queue.ErrQuotaExceeded) || !strings.Contains(err.Error(), "storage.project_quotas.default") {
		t.Fatalf("with the admin's quota cleared, the config file's holds again: %v", err)
	}
	if err := s.ClearProjectQuota(ctx, "default"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("clearing a quota never set: %v, want ErrNotFound", err)
	}
	if err := s.SetProjectQuota(ctx, "default", -1, "tok-1"); err == nil {
		t.Fatal("a negative quota must be refused")
	}
}

// A checkpoint record repeated after its first reply was lost answers with
// the first record's number, even once the quota or the attempt's end would
// refuse it: a refusal tells the worker nothing names its archive, and the
// worker deletes it.
func TestARepeatedCheckpointRecordIsAnsweredEvenWhenANewOneWouldBeRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := queuetest.Store(t, nil)
	s.Storage = queue.Storage{ProjectQuotaBytes: 1000}
	id := runningJob(t, s)
	rec := func(attempt int, uri string) (int, error) {
		return s.RecordCheckpoint(ctx, id, attempt, queue.ArchiveRecord{Bytes: 600, SHA256: "x", Region: "r", StoreURI: uri})
	}
	if seq, err := rec(1, "nats-os://b/a"); err != nil || seq != 1 {
		t.Fatalf("first record: %d, %v", seq, err)
	}
	if seq, err := rec(1, "nats-os://b/a"); err != nil || seq != 1 {
		t.Errorf("repeated past the quota: %d, %v; want the first record's 1", seq, err)
	}
	if _, err := rec(1, "nats-os://b/b"); !errors.Is(err, queue.ErrQuotaExceeded) {
		t.Errorf("a new checkpoint past the quota: got %v, want ErrQuotaExceeded", err)
	}
	s.Storage = queue.Storage{}
	expireLease(t, s, id)
	if _, err := claim(t, s, id, time.Minute); err != nil {
		t.Fatal(err)
	}
	if seq, err := rec(1, "nats-os://b/a"); err != nil || seq != 1 {
		t.Errorf("repeated after the attempt was superseded: %d, %v; want the first record's 1", seq, err)
	}
	if _, err := rec(1, "nats-os://b/c"); !errors.Is(err, queue.ErrFenced) {
		t.Errorf("a new checkpoint of the superseded attempt: got %v, want ErrFenced", err)
	}
	if _, err := rec(2, "nats-os://b/a"); err == nil || queue.RecordRefused(err) {
		t.Errorf("attempt 1's archive recorded again by attempt 2: got %v, want an error that is no refusal", err)
	}
}
