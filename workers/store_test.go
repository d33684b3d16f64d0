package workers_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/workers"
)

// The workers of a pool upload their first archives at the same time on a
// fresh deployment: each creates the pool's bucket if it is missing (with
// its own storage limits: a worker whose configuration differs, or a client
// of its own), and none of those uploads may fail because another created
// the bucket first.
func TestFirstUploadsOfAPoolFromManyWorkersAtOnceAllSucceed(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	for round := range 5 {
		pool := fmt.Sprintf("pool-race-%d", round)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := range 8 {
			js, err := jetstream.New(queuetest.Connect(t, n.WorkerURL(t, pool, "eu-race"), nil))
			if err != nil {
				t.Fatal(err)
			}
			store := &workers.ObjectStore{JS: js, MaxBytes: int64(w%2) << 30}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := store.Put(context.Background(), queue.ArchiveBucket(pool), fmt.Sprintf("jobs/w%d/ckpt.tar.zst", w), strings.NewReader("data")); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("pool %s: %v", pool, err)
		}
	}
}

// bucketUpdates counts the bucket creations and updates an ObjectStore asks
// for.
type bucketUpdates struct {
	jetstream.JetStream
	mu sync.Mutex
	n  int
}

func (b *bucketUpdates) CreateOrUpdateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	b.mu.Lock()
	b.n++
	b.mu.Unlock()
	return b.JetStream.CreateOrUpdateObjectStore(ctx, cfg)
}

// A worker whose pool's bucket is already configured as it would configure
// it uses the bucket as it is; one with other storage limits updates it.
func TestABucketConfiguredAlreadyIsUsedWithoutAnUpdate(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	const pool = "pool-update"
	put := func(maxBytes int64) int {
		t.Helper()
		js, err := jetstream.New(queuetest.Connect(t, n.WorkerURL(t, pool, "eu-update"), nil))
		if err != nil {
			t.Fatal(err)
		}
		u := &bucketUpdates{JetStream: js}
		store := &workers.ObjectStore{JS: u, MaxBytes: maxBytes}
		if _, err := store.Put(context.Background(), queue.ArchiveBucket(pool), "jobs/a/ckpt.tar.zst", strings.NewReader("data")); err != nil {
			t.Fatal(err)
		}
		return u.n
	}
	if got := put(0); got != 1 {
		t.Fatalf("the first worker created the bucket with %d calls, want 1", got)
	}
	if got := put(0); got != 0 {
		t.Fatalf("a second worker with the same limits updated the bucket %d times, want none", got)
	}
	if got := put(1 << 30); got != 1 {
		t.Fatalf("a worker with another size cap updated the bucket %d times, want once", got)
	}
	if got := put(1 << 30); got != 0 {
		t.Fatalf("the next worker with that cap updated the bucket %d times, want none", got)
	}
}
