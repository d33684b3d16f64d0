package control_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/workers"
)

// A restore of a checkpoint another pool stored copies it into the asking
// pool's bucket, checked against its sha256, and records the copy under the
// attempt; a copy that does not match, or one for an attempt that no longer
// owns the job, is neither recorded nor kept.
func TestWorkerServiceRestoreCopiesAnotherPoolsCheckpointIntoThePoolsBucket(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	archives := &workers.ObjectStore{JS: n.JS}
	pools := staticPools{"p": {Region: "r", Country: "DE"}, "other": {Region: "r", Country: "DE"}}
	if _, err := (&control.WorkerService{NATS: n.NC, Store: s, Pools: pools, Archives: archives}).Start(ctx); err != nil {
		t.Fatal(err)
	}
	id := placedJob(t, s)
	if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{claimOf(id, "p")}}); r.Claims[0].Claimed == nil {
		t.Fatalf("claim: %+v", r.Claims[0].Error)
	}
	// Checkpoints the job left in another pool's bucket before it was
	// re-placed here: one whose bytes match their record, one that does not.
	body := bytes.Repeat([]byte("weights "), 50_000)
	sum := sha256.Sum256(body)
	good, err := archives.Put(ctx, queue.ArchiveBucket("other"), "jobs/"+id.String()+"/checkpoint-a1-1.tar.zst", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	bad, err := archives.Put(ctx, queue.ArchiveBucket("other"), "jobs/"+id.String()+"/checkpoint-a1-2.tar.zst", strings.NewReader("tampered"))
	if err != nil {
		t.Fatal(err)
	}
	// Recorded as they were, by the store (the worker service would refuse
	// this pool's worker naming another pool's bucket).
	for _, uri := range []string{good, bad} {
		if _, err := s.RecordCheckpoint(ctx, id, 1, queue.ArchiveRecord{Bytes: int64(len(body)), SHA256: hex.EncodeToString(sum[:]), Region: "r", StoreURI: uri}); err != nil {
			t.Fatal(err)
		}
	}
	restore := func(attempt, seq int) *queue.WorkerReply {
		return ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpRestore), queue.WorkerRequest{Pool: "p", JobID: id, Attempt: attempt, Seq: seq})
	}
	copyName := func(attempt, seq int) string {
		return "jobs/" + id.String() + "/checkpoint-a" + string(rune('0'+attempt)) + "-restore-s" + string(rune('0'+seq)) + ".tar.zst"
	}
	for range 2 { // a repeat finds the same copy
		r := restore(1, 1)
		if r.Error != nil || r.Checkpoint == nil || r.Checkpoint.Seq != 3 || r.Checkpoint.StoreURI != queue.JobArchivePrefix("p", id)+"checkpoint-a1-restore-s1.tar.zst" {
			t.Fatalf("restore of checkpoint 1: %+v %+v", r.Checkpoint, r.Error)
		}
	}
	own, err := n.JS.ObjectStore(ctx, queue.ArchiveBucket("p"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := own.GetBytes(ctx, copyName(1, 1)); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("the copy in the pool's bucket: %d bytes, %v", len(got), err)
	}
	// Asking again cannot mend it: the worker is told the archive is lost.
	if r := restore(1, 2); r.Error == nil || r.Error.Kind != queue.WireArchiveLost || !strings.Contains(r.Error.Message, "checkpoint 2 of job "+id.String()+": archive lost: "+bad+" holds sha256") {
		t.Fatalf("restore of a checkpoint whose bytes differ from their record: %+v", r.Error)
	}
	// An attempt that does not run the job gets nothing: not even a copy
	// deleted after the fact, which the pool's workers could have read in
	// between. Nothing reaches the pool's bucket (its stream's last sequence
	// stays where it was).
	lastSeq := func() uint64 {
		info, err := n.JS.Stream(ctx, "OBJ_"+queue.ArchiveBucket("p"))
		if err != nil {
			t.Fatal(err)
		}
		return info.CachedInfo().State.LastSeq
	}
	before := lastSeq()
	if r := restore(2, 1); r.Error == nil || r.Error.Kind != queue.WireFenced {
		t.Fatalf("restore for an attempt that does not own the job: %+v", r.Error)
	}
	if after := lastSeq(); after != before {
		t.Fatalf("a refused restore wrote into the pool's bucket (last sequence %d → %d)", before, after)
	}
	for _, name := range []string{copyName(1, 2), copyName(2, 1)} {
		if _, err := own.GetInfo(ctx, name); err == nil || !strings.Contains(err.Error(), jetstream.ErrObjectNotFound.Error()) {
			t.Errorf("a refused copy %s must be deleted, got %v", name, err)
		}
	}
	if cps, _ := s.Checkpoints(ctx, id); len(cps) != 3 {
		t.Fatalf("want the two checkpoints and one copy recorded, got %+v", cps)
	}
	if r := restore(1, 9); r.Error == nil || r.Error.Kind != queue.WireNotFound {
		t.Fatalf("restore of an unknown checkpoint: %+v", r.Error)
	}
	// A recorded checkpoint whose archive is no longer in its bucket.
	gone := queue.ArchiveScheme + queue.ArchiveBucket("other") + "/jobs/" + id.String() + "/checkpoint-a1-3.tar.zst"
	if _, err := s.RecordCheckpoint(ctx, id, 1, queue.ArchiveRecord{Bytes: 1, SHA256: "x", Region: "r", StoreURI: gone}); err != nil {
		t.Fatal(err)
	}
	if r := restore(1, 4); r.Error == nil || r.Error.Kind != queue.WireArchiveLost || !strings.Contains(r.Error.Message, gone+": archive lost: not in its bucket") {
		t.Fatalf("restore of a checkpoint whose archive is gone: %+v", r.Error)
	}
	if cps, _ := s.Checkpoints(ctx, id); cps[len(cps)-1].StoreURI != gone {
		t.Fatalf("a checkpoint whose archive is gone must record no copy, got %+v", cps)
	}
	if _, err := own.GetInfo(ctx, copyName(1, 4)); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("the empty copy of a lost checkpoint must be deleted, got %v", err)
	}
}
