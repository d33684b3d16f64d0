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
