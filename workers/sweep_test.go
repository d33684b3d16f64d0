package workers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/workers"
)

// claimedJob records a job placed on the test pool and claimed as attempt 1.
func claimedJob(t *testing.T, s *store.Store) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id := uuid.New()
	spec, err := queue.ParseSpec([]byte("command: [/bin/true]\n"))
	if err != nil {
		t.Fatal(err)
	}
	placed := []queue.PlacedJob{{JobID: id, Placement: queue.Placement{Version: 1, Pool: testPool.Pool, Region: testPool.Region}}}
	if _, _, err := s.RecordAndPlace(ctx, []queue.NewJob{{ID: id, Spec: spec}}, queue.Decided{Placed: placed}); err != nil {
		t.Fatal(err)
	}
	res, err := s.ClaimMany(ctx, []queue.ClaimRequest{{JobID: id, PlacementVersion: 1, Lease: time.Hour, WorkerID: "w", Host: "h", PID: 1, Pool: testPool.Pool}})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res[0].Err)
	}
	return id
}

// partialUpload leaves in bucket what an upload killed half-way leaves: the
// chunks of an object under a fresh NUID, and no object naming them. It
// returns their subject.
func partialUpload(t *testing.T, js jetstream.JetStream, bucket string) string {
	t.Helper()
	subject := "$O." + bucket + ".C." + strings.ReplaceAll(uuid.NewString(), "-", "")
	for range 3 {
		if _, err := js.Publish(context.Background(), subject, bytes.Repeat([]byte{7}, 1024)); err != nil {
			t.Fatal(err)
		}
	}
	return subject
}

// chunkSubjects lists the chunk subjects bucket holds.
func chunkSubjects(t *testing.T, js jetstream.JetStream, bucket string) []string {
	t.Helper()
	stream, err := js.Stream(context.Background(), "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter("$O."+bucket+".C.>"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for s := range info.State.Subjects {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// bucketObjects lists the names of the objects in bucket.
func bucketObjects(t *testing.T, js jetstream.JetStream, bucket string) []string {
	t.Helper()
	b, err := js.ObjectStore(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := b.List(context.Background())
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Name)
	}
	slices.Sort(out)
	return out
}

// A sweep deletes what was written before its time and that no record names
// (an archive whose record never came, the chunks of an upload that never
// finished), and nothing else: not a recorded checkpoint or result, not a
// pruned archive the pruner has still to delete, not an object outside
// jobs/<job>/, and not what was written after its time (an upload still
// under way, or one whose record is on its way).
func TestSweepRemovesOnlyWhatNoRecordNamesAndIsOlderThanItsTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	s.Storage.KeepCheckpoints = 1
	archives := &workers.ObjectStore{JS: n.JS}
	bucket := queue.ArchiveBucket(testPool.Pool)
	put := func(name string, size int) string {
		t.Helper()
		uri, err := archives.Put(ctx, bucket, name, bytes.NewReader(bytes.Repeat([]byte{1}, size)))
		if err != nil {
			t.Fatal(err)
		}
		return uri
	}
	record := func(id uuid.UUID, uri string) {
		t.Helper()
		if _, err := s.RecordCheckpoint(ctx, id, 1, queue.ArchiveRecord{Bytes: 1, SHA256: "x", Region: testPool.Region, StoreURI: uri}); err != nil {
			t.Fatal(err)
		}
	}

	running, finished := claimedJob(t, s), claimedJob(t, s)
	ckpt := func(k int) string { return fmt.Sprintf("jobs/%s/checkpoint-a1-%d.tar.zst", running, k) }
	outputs := fmt.Sprintf("jobs/%s/outputs-a1.tar.zst", finished)
	stranger := fmt.Sprintf("jobs/%s/outputs-a1.tar.zst", uuid.New())
	// The first checkpoint is pruned by the second (keep 1): it waits in
	// checkpoint_garbage for the pruner, which has not run yet.
	record(running, put(ckpt(1), 10))
	record(running, put(ckpt(2), 10))
	if err := s.Succeed(ctx, finished, 1, &queue.ArchiveRecord{Bytes: 10, SHA256: "x", Region: testPool.Region, StoreURI: put(outputs, 10)}); err != nil {
		t.Fatal(err)
	}
	put(ckpt(3), 3000)       // its worker died before recording it
	put(stranger, 40)        // a job no record knows
	put("notes/kept.txt", 5) // not gpuq's to judge
	killed := partialUpload(t, n.JS, bucket)

	time.Sleep(20 * time.Millisecond)
	cut := time.Now()
	time.Sleep(20 * time.Millisecond)
	put(ckpt(4), 10) // its record is on its way
	uploading := partialUpload(t, n.JS, bucket)

	res, err := archives.Sweep(ctx, cut, s.RecordedArchives)
	if err != nil {
		t.Fatal(err)
	}
	if res.Archives != 2 || res.Bytes != 3040 || res.Partial != 1 {
		t.Errorf("want 2 unrecorded archives of 3040 bytes and 1 unfinished upload removed, got %+v", res)
	}
	want := []string{ckpt(1), ckpt(2), ckpt(4), outputs, "notes/kept.txt"}
	slices.Sort(want)
	if got := bucketObjects(t, n.JS, bucket); !slices.Equal(got, want) {
		t.Errorf("objects after the sweep:\n got %q\nwant %q", got, want)
	}
	chunks := chunkSubjects(t, n.JS, bucket)
	if slices.Contains(chunks, killed) || !slices.Contains(chunks, uploading) {
		t.Errorf("want the old unfinished upload's chunks purged and the new one's kept, got %q", chunks)
	}
	// What the sweep kept is whole.
	for _, name := range want {
		var buf bytes.Buffer
		if err := archives.Get(ctx, queue.ArchiveScheme+bucket+"/"+name, &buf); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// A second sweep with the same time finds nothing more. A later one
	// takes the other unfinished upload and checkpoint 4, never recorded.
	// A running pruner deletes the pruned checkpoint 1 (from its record)
	// and sweeps checkpoint 5, never recorded either, leaving the rest.
	if res, err := archives.Sweep(ctx, cut, s.RecordedArchives); err != nil || res != (queue.SweepResult{}) {
		t.Errorf("want a second sweep to find nothing, got %+v, %v", res, err)
	}
	if res, err := archives.Sweep(ctx, time.Now(), s.RecordedArchives); err != nil || res.Partial != 1 || res.Archives != 1 {
		t.Errorf("want the later sweep to take the other unfinished upload and the unrecorded checkpoint 4, got %+v, %v", res, err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	pruner := &control.Pruner{Store: s, Archives: archives, Sweeper: archives, Records: s, OrphanAge: time.Millisecond, Interval: 50 * time.Millisecond}
	go pruner.Run(runCtx) //nolint:errcheck // ends with runCtx
	put(ckpt(5), 10)
	want = []string{ckpt(2), outputs, "notes/kept.txt"}
	slices.Sort(want)
	queuetest.Eventually(t, 10*time.Second, "the running pruner to delete checkpoints 1 and 5", func() bool {
		return slices.Equal(bucketObjects(t, n.JS, bucket), want)
	})
}

// A worker killed while it uploads a checkpoint leaves chunks that no object
// names, in a bucket with a byte cap, and no record to prune them by; the
// control plane's sweep removes them. The sweep runs here with an orphan
// age of a nanosecond (the default is an hour), once the worker is dead.
func TestAWorkerKilledWhileUploadingACheckpointLeavesNothingOnceSwept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCluster(t)
	bucket := queue.ArchiveBucket(testPool.Pool)
	a := c.startWorker(t, 30*time.Second, 5*time.Second)
	id := c.submit(t, `name: big
command: [/bin/sh, -c, 'head -c 64000000 /dev/urandom > "$GPUQ_CHECKPOINT_DIR/blob" && gpuq checkpoint save; sleep 600']
`)
	// Unfinished uploads: chunks of a NUID no object has yet.
	unfinished := func() int {
		stream, err := c.n.JS.Stream(ctx, "OBJ_"+bucket)
		if err != nil {
			return 0 // no upload has started
		}
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter("$O."+bucket+".C.>"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.n.JS.ObjectStore(ctx, bucket)
		if err != nil {
			return 0
		}
		objs, err := b.List(ctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
			t.Fatal(err)
		}
		named := map[string]bool{}
		for _, o := range objs {
			named["$O."+bucket+".C."+o.NUID] = true
		}
		n := 0
		for subject := range info.State.Subjects {
			if !named[subject] {
				n++
			}
		}
		return n
	}
	queuetest.Eventually(t, 60*time.Second, "the checkpoint's upload to start", func() bool { return unfinished() > 0 })
	if err := a.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.Wait() //nolint:errcheck // killed
	// The server goes on storing what the worker sent before it died (its
	// connection's buffered data) for a moment; the sweep rightly takes a
	// chunk stored since it began for an upload under way, so it waits for
	// the bucket to settle.
	state := func() jetstream.StreamState {
		stream, err := c.n.JS.Stream(ctx, "OBJ_"+bucket)
		if err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State
	}
	seen := state().LastSeq
	queuetest.Eventually(t, 30*time.Second, "the killed worker's chunks to stop arriving", func() bool {
		time.Sleep(300 * time.Millisecond)
		now := state().LastSeq
		settled := now == seen
		seen = now
		return settled
	})
	if cps := c.checkpoints(t, id); len(cps) != 0 {
		t.Fatalf("the worker was killed after recording its checkpoint: %+v", cps)
	}
	left := unfinished()
	if left == 0 && len(bucketObjects(t, c.n.JS, bucket)) == 0 {
		t.Fatal("the killed upload left nothing to sweep")
	}

	pruner := &control.Pruner{Store: c.store, Archives: &workers.ObjectStore{JS: c.n.JS}, Sweeper: &workers.ObjectStore{JS: c.n.JS},
		Records: c.store, OrphanAge: time.Nanosecond}
	res, err := pruner.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Partial != left {
		t.Errorf("want the %d unfinished uploads swept, got %+v", left, res)
	}
	if objs, chunks := bucketObjects(t, c.n.JS, bucket), chunkSubjects(t, c.n.JS, bucket); len(objs) != 0 || len(chunks) != 0 {
		t.Errorf("want an empty bucket after the sweep, got objects %q and chunks %q", objs, chunks)
	}
	// What is left is the delete markers of the swept archives, if any.
	after := state()
	if after.Bytes > 4096 {
		t.Errorf("want the bucket's bytes back after the sweep, it holds %d", after.Bytes)
	}
	t.Logf("swept %+v; the bucket holds %d bytes in %d messages", res, after.Bytes, after.Msgs)
}
