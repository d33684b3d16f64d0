package control_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/workers"
)

// placedJobOf records a job of spec placed on pool p.
func placedJobOf(t *testing.T, s *store.Store, spec string) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id := uuid.New()
	if _, err := s.RecordJobs(ctx, []queue.NewJob{{ID: id, Spec: mustSpec(t, spec)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordPlacements(ctx, []queue.PlacedJob{{JobID: id, Placement: queue.Placement{Version: 1, Pool: "p", Region: "r"}}}); err != nil {
		t.Fatal(err)
	}
	return id
}

// A worker asking for its job's working directory gets one copy in its
// pool's bucket, made once however many of the pool's jobs name it; the
// sweep of unrecorded archives keeps that copy while its upload is kept;
// a directory not uploaded, one whose bytes no longer match, or a request
// of an attempt that does not run the job, gets no copy.
func TestAWorkersJobGetsItsWorkingDirectoryCopiedIntoItsPoolsBucketOnce(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	archives := &workers.ObjectStore{JS: n.JS}
	wd := &control.Workdirs{Store: archives, TempDir: t.TempDir()}
	pools := staticPools{"p": {Region: "r", Country: "DE"}}
	if _, err := (&control.WorkerService{NATS: n.NC, Store: s, Pools: pools, Archives: archives, Workdirs: wd}).Start(ctx); err != nil {
		t.Fatal(err)
	}
	// What a client uploads: any gzip stream will do here.
	body := append([]byte{0x1f, 0x8b}, bytes.Repeat([]byte("code "), 40_000)...)
	digest := sha256.Sum256(body)
	sum := hex.EncodeToString(digest[:])
	if n, err := wd.Upload(ctx, "ml", sum, bytes.NewReader(body)); err != nil || n != int64(len(body)) {
		t.Fatalf("upload: %d, %v", n, err)
	}
	spec := "project: ml\nworkdir: sha256:" + sum + "\ncommand: [python3, train.py]\n"
	first, second := placedJobOf(t, s, spec), placedJobOf(t, s, spec)
	workdir := func(id uuid.UUID, attempt int) *queue.WorkerReply {
		return ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpWorkdir), queue.WorkerRequest{Pool: "p", JobID: id, Attempt: attempt})
	}
	// Before its claim, the job's attempt 1 does not run here.
	if r := workdir(first, 1); r.Error == nil || r.Error.Kind != queue.WireFenced {
		t.Fatalf("a workdir for an attempt not running: %+v", r.Error)
	}
	want := queue.ArchiveScheme + queue.ArchiveBucket("p") + "/" + queue.WorkdirPoolObject("ml", sum)
	var modTime time.Time
	for _, id := range []uuid.UUID{first, second} {
		if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{claimOf(id, "p")}}); r.Claims[0].Claimed == nil {
			t.Fatalf("claim: %+v", r.Claims[0].Error)
		}
		r := workdir(id, 1)
		if r.Error != nil || r.Workdir == nil || *r.Workdir != (queue.WorkdirCopy{StoreURI: want, SHA256: sum, Bytes: int64(len(body))}) {
			t.Fatalf("workdir of job %s: %+v %+v", id, r.Workdir, r.Error)
		}
		st, err := archives.Stat(ctx, want)
		if err != nil || st.SHA256 != sum {
			t.Fatalf("the copy: %+v, %v", st, err)
		}
		if !modTime.IsZero() && !st.ModTime.Equal(modTime) {
			t.Fatalf("the second job's request copied the directory again (written %v, then %v)", modTime, st.ModTime)
		}
		modTime = st.ModTime
	}
	var got bytes.Buffer
	if err := archives.Get(ctx, want, &got); err != nil || !bytes.Equal(got.Bytes(), body) {
		t.Fatalf("the copy holds %d bytes (%v), want the upload's %d", got.Len(), err, len(body))
	}

	// The sweep of unrecorded archives keeps the copy while its upload is
	// kept, and takes it once the upload is gone.
	sweep := func() queue.SweepResult {
		t.Helper()
		res, err := archives.Sweep(ctx, time.Now().Add(time.Hour), wd.WorkdirRecords(s).RecordedArchives)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := sweep(); res.Archives != 0 {
		t.Fatalf("the sweep deleted %d archives while the upload is kept", res.Archives)
	}
	if _, err := archives.Stat(ctx, want); err != nil {
		t.Fatalf("the copy after the sweep: %v", err)
	}
	upload := queue.ArchiveScheme + queue.WorkdirBucket + "/" + queue.WorkdirObject("ml", sum)
	if err := archives.Delete(ctx, upload); err != nil {
		t.Fatal(err)
	}
	if res := sweep(); res.Archives != 1 {
		t.Fatalf("the sweep deleted %d archives once the upload was gone, want the copy", res.Archives)
	}

	// Not uploaded (any more): the job cannot run anywhere.
	third := placedJobOf(t, s, spec)
	if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{claimOf(third, "p")}}); r.Claims[0].Claimed == nil {
		t.Fatalf("claim: %+v", r.Claims[0].Error)
	}
	if r := workdir(third, 1); r.Error == nil || r.Error.Kind != queue.WireWorkdirMissing ||
		!strings.Contains(r.Error.Message, "sha256:"+sum+" was never uploaded for project ml, or was deleted storage.workdir_retention after its last upload") {
		t.Fatalf("a workdir no longer stored: %+v", r.Error)
	}
	// Stored bytes that are not the digest's: lost, and no copy is left.
	if _, err := archives.Put(ctx, queue.WorkdirBucket, queue.WorkdirObject("ml", sum), strings.NewReader("tampered")); err != nil {
		t.Fatal(err)
	}
	if r := workdir(third, 1); r.Error == nil || r.Error.Kind != queue.WireArchiveLost || !strings.Contains(r.Error.Message, "its stored bytes have SHA-256") {
		t.Fatalf("a workdir whose bytes differ: %+v", r.Error)
	}
	if _, err := archives.Stat(ctx, want); err == nil {
		t.Fatal("a copy that does not match its digest was left in the pool's bucket")
	}
	// A job without one.
	plain := placedJobOf(t, s, "command: [/bin/true]\n")
	if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{claimOf(plain, "p")}}); r.Claims[0].Claimed == nil {
		t.Fatalf("claim: %+v", r.Claims[0].Error)
	}
	if r := workdir(plain, 1); r.Error == nil || r.Error.Kind != queue.WireBadRequest {
		t.Fatalf("a workdir of a job without one: %+v", r.Error)
	}
}
