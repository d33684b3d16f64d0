package workers_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/workers"
)

// After 1,000 jobs that each save 5 checkpoints, the checkpoint bucket holds
// the latest 3 of every unfinished job, and none of a job finished longer
// ago than the retention. Checkpoints go the way a worker saves them: an
// archive uploaded to the region's object-store bucket, then recorded under
// the attempt (which prunes the older ones), while the control plane's
// pruner deletes pruned archives from the bucket.
func TestThousandJobsOfFiveCheckpointsKeepThreePerUnfinishedJobAndNoneForFinishedJobsPastRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const jobs, saves, keep = 1000, 5, 3
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	s.Storage = queue.Storage{KeepCheckpoints: keep, CheckpointRetention: time.Minute}
	archives := &workers.ObjectStore{JS: n.JS}

	ids := make([]uuid.UUID, jobs)
	for lo := 0; lo < jobs; lo += 250 {
		var batch []queue.NewJob
		var placed []queue.PlacedJob
		for i := lo; i < lo+250; i++ {
			ids[i] = uuid.New()
			spec, err := queue.ParseSpec([]byte("command: [/bin/true]\n"))
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, queue.NewJob{ID: ids[i], Spec: spec})
			placed = append(placed, queue.PlacedJob{JobID: ids[i], Placement: queue.Placement{Version: 1, Pool: "eu-cpu", Region: "eu-test-1"}})
		}
		if _, _, err := s.RecordAndPlace(ctx, batch, queue.Decided{Placed: placed}); err != nil {
			t.Fatal(err)
		}
		reqs := make([]queue.ClaimRequest, len(batch))
		for i, nj := range batch {
			reqs[i] = queue.ClaimRequest{JobID: nj.ID, PlacementVersion: 1, Lease: time.Hour, WorkerID: "w", Host: "h", PID: 1, Pool: "eu-cpu"}
		}
		res, err := s.ClaimMany(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}

	pruneCtx, stopPruner := context.WithCancel(ctx)
	pruned := make(chan error, 1)
	go func() {
		pruned <- (&control.Pruner{Store: s, Archives: archives, Interval: 200 * time.Millisecond}).Run(pruneCtx)
	}()
	work := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				for k := 1; k <= saves; k++ {
					name := fmt.Sprintf("jobs/%s/checkpoint-a1-%d.tar.zst", ids[i], k)
					data := bytes.Repeat([]byte{byte(k)}, 512)
					uri, err := archives.Put(ctx, queue.ArchiveBucket(testPool.Pool), name, bytes.NewReader(data))
					if err == nil {
						_, err = s.RecordCheckpoint(ctx, ids[i], 1, queue.ArchiveRecord{Bytes: int64(len(data)), SHA256: "x", Region: "eu-test-1", StoreURI: uri})
					}
					if err != nil {
						errs <- err
						return
					}
				}
				// Every other job finishes.
				if i%2 == 0 {
					if err := s.Succeed(ctx, ids[i], 1, nil); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	for i := range ids {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	stopPruner()
	if err := <-pruned; err != nil {
		t.Fatal(err)
	}

	perJob := func() map[string][]string {
		t.Helper()
		out := map[string][]string{}
		for _, name := range bucketObjects(t, n.JS, queue.ArchiveBucket(testPool.Pool)) {
			parts := strings.Split(name, "/")
			out[parts[1]] = append(out[parts[1]], parts[2])
		}
		return out
	}
	// Within the retention a finished job keeps its latest checkpoints.
	pruner := &control.Pruner{Store: s, Archives: archives}
	if _, err := pruner.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	objects := perJob()
	for i, id := range ids {
		got := objects[id.String()]
		if len(got) != keep {
			t.Fatalf("job %d (finished: %v) has %d checkpoints in the bucket, want the latest %d: %v", i, i%2 == 0, len(got), keep, got)
		}
		for _, name := range got {
			if name == "checkpoint-a1-1.tar.zst" || name == "checkpoint-a1-2.tar.zst" {
				t.Fatalf("job %d kept an old checkpoint %s", i, name)
			}
		}
	}
	// Past the retention a finished job keeps none.
	pruner.Now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	if _, err := pruner.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	objects = perJob()
	for i, id := range ids {
		want := keep
		if i%2 == 0 {
			want = 0
		}
		if got := objects[id.String()]; len(got) != want {
			t.Fatalf("job %d (finished: %v) has %d checkpoints in the bucket past the retention, want %d: %v", i, i%2 == 0, len(got), want, got)
		}
	}
	var records, garbage int
	if err := s.DB.QueryRow(`SELECT (SELECT count(*) FROM checkpoints), (SELECT count(*) FROM checkpoint_garbage)`).Scan(&records, &garbage); err != nil {
		t.Fatal(err)
	}
	if records != jobs/2*keep || garbage != 0 {
		t.Fatalf("%d checkpoints recorded and %d archives still to delete; want %d and 0", records, garbage, jobs/2*keep)
	}
	// A running job resumes from its latest checkpoint, which is still there.
	latest, err := s.Checkpoints(ctx, ids[1])
	if err != nil || len(latest) != keep || latest[keep-1].Seq != saves {
		t.Fatalf("checkpoints of a running job: %+v, %v", latest, err)
	}
	var buf bytes.Buffer
	if err := archives.Get(ctx, latest[keep-1].StoreURI, &buf); err != nil || buf.Len() != 512 {
		t.Fatalf("the latest checkpoint of a running job must be downloadable: %d bytes, %v", buf.Len(), err)
	}
}

// An archive bucket is capped in bytes from the configuration: an upload
// that would pass the cap fails, and the archives already there stay.
func TestArchiveBucketsAreCappedInBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := queuetest.StartNATS(t)
	archives := &workers.ObjectStore{JS: n.JS, MaxBytes: 64 << 10}
	first, err := archives.Put(ctx, queue.ArchiveBucket("eu-cap"), "a", bytes.NewReader(make([]byte, 40<<10)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := archives.Put(ctx, queue.ArchiveBucket("eu-cap"), "b", bytes.NewReader(make([]byte, 40<<10))); err == nil {
		t.Fatal("an upload past the bucket's cap must fail")
	}
	var buf bytes.Buffer
	if err := archives.Get(ctx, first, &buf); err != nil || buf.Len() != 40<<10 {
		t.Fatalf("the archive already stored must stay: %d bytes, %v", buf.Len(), err)
	}
}
