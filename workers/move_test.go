package workers_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// spotPool is spot capacity in testPool's region: a job preempted there is
// re-placed on testPool, another pool of the same region.
var spotPool = local.PoolConfig{Pool: "eu-cpu-spot", Region: testPool.Region, Country: testPool.Country, Card: "cpu", VCPU: 8, MemoryGB: 32, Tier: "spot", PricePerHour: "0.03"}

// A job preempted on one pool and re-placed on another pool of its region
// resumes from its checkpoint, although the new pool's workers may not read
// the old pool's bucket: the control plane copies the checkpoint into the
// new pool's bucket and records the copy under the new attempt.
func TestJobRePlacedOnAnotherPoolOfItsRegionResumesFromACopyOfItsCheckpoint(t *testing.T) {
	t.Parallel()
	c := newClusterOf(t, testPool, spotPool)
	ctx := context.Background()
	c.startReplacer(t)
	spot := c.startPoolWorker(t, spotPool, 30*time.Second, 5*time.Second)
	id := c.submit(t, counterJob(25, "0.2")+"placement: {tier: spot-then-on-demand, residency: EU}\n")
	c.waitState(t, id, queue.StateRunning, 30*time.Second)
	waitCheckpoint(t, c, id, 2)
	if err := spot.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, 30*time.Second, "the job re-placed on "+testPool.Pool, func() bool {
		p, err := c.store.LatestPlacement(ctx, id)
		return err == nil && p.Pool == testPool.Pool
	})
	c.startWorker(t, 30*time.Second, 5*time.Second)
	c.waitState(t, id, queue.StateSucceeded, 60*time.Second)

	attempts := c.attempts(t, id)
	if len(attempts) != 2 || attempts[0].Pool != spotPool.Pool || attempts[0].Outcome != queue.OutcomePreempted || attempts[1].Pool != testPool.Pool {
		t.Fatalf("want attempt 1 preempted on %s and attempt 2 on %s, got %+v", spotPool.Pool, testPool.Pool, attempts)
	}
	var last, copied *queue.Checkpoint
	for _, cp := range c.checkpoints(t, id) {
		switch {
		case cp.Attempt == 1:
			if !strings.HasPrefix(cp.StoreURI, queue.JobArchivePrefix(spotPool.Pool, id)) {
				t.Errorf("attempt 1's checkpoint %d lies outside its pool's bucket: %s", cp.Seq, cp.StoreURI)
			}
			last = &cp
		case copied == nil:
			copied = &cp
		}
	}
	if last == nil || copied == nil {
		t.Fatalf("want attempt 1's checkpoints and attempt 2's copy, got %+v", c.checkpoints(t, id))
	}
	want := queue.JobArchivePrefix(testPool.Pool, id) + fmt.Sprintf("checkpoint-a2-restore-s%d.tar.zst", last.Seq)
	if copied.StoreURI != want || copied.SHA256 != last.SHA256 || copied.Region != testPool.Region || copied.Seq <= last.Seq {
		t.Fatalf("attempt 2's first checkpoint must be the copy of checkpoint %d in %s's bucket (%s), got %+v", last.Seq, testPool.Pool, want, copied)
	}
	k := c.checkpointStep(t, *last)
	if logs := c.logs(t, id); !strings.Contains(logs, fmt.Sprintf("start attempt=2 resumed=1 step=%d\n", k)) {
		t.Fatalf("attempt 2 must resume from attempt 1's last checkpoint (step %d); logs:\n%s", k, logs)
	}
}

// startReplacer runs the control plane's replacer until the test ends.
func (c *cluster) startReplacer(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	replacing := make(chan struct{})
	go func() {
		defer close(replacing)
		(&control.Replacer{JS: c.n.JS, Store: c.store, Placer: c.placer}).Run(ctx) //nolint:errcheck // ends with ctx
	}()
	t.Cleanup(func() { cancel(); <-replacing })
}

// gatedSpot offers the pools of a provider, with spotPool's capacity gone
// while down is set.
type gatedSpot struct {
	adapters.OfferSource
	mu   sync.Mutex
	down bool
}

func (g *gatedSpot) Offers(ctx context.Context) ([]policy.Offer, error) {
	offers, err := g.OfferSource.Offers(ctx)
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range offers {
		if offers[i].Pool == spotPool.Pool && g.down {
			offers[i].Availability = policy.Unavailable
		}
	}
	return offers, err
}

func (g *gatedSpot) set(down bool) {
	g.mu.Lock()
	g.down = down
	g.mu.Unlock()
}

// A job running on on-demand that the control plane asks to move (as the
// Rebalancer does once spot is back) is stopped as on a preemption notice:
// its final checkpoint is recorded, the attempt ends moved (neither an
// error nor a preemption), the Replacer places it on spot, and it resumes
// there from that checkpoint rather than on on-demand again.
func TestJobAskedToMoveIsHandedBackWithItsCheckpointAndResumesOnSpot(t *testing.T) {
	t.Parallel()
	c := newClusterOf(t, testPool, spotPool)
	gate := &gatedSpot{OfferSource: c.placer.Sources[0], down: true}
	c.placer.Sources = []adapters.OfferSource{gate}
	c.placer.OfferTTL = 100 * time.Millisecond
	ctx := context.Background()
	c.startReplacer(t)
	c.startWorker(t, 30*time.Second, 5*time.Second)
	c.startPoolWorker(t, spotPool, 30*time.Second, 5*time.Second)
	id := c.submit(t, counterJob(25, "0.2")+"placement: {tier: spot-then-on-demand, residency: EU}\n")
	c.waitState(t, id, queue.StateRunning, 30*time.Second)
	if p, err := c.store.LatestPlacement(ctx, id); err != nil || p.Pool != testPool.Pool {
		t.Fatalf("with spot down the job must start on %s, got %+v, %v", testPool.Pool, p, err)
	}
	waitCheckpoint(t, c, id, 2)
	gate.set(false)
	time.Sleep(200 * time.Millisecond) // past the placer's offer cache
	if err := queue.NotifyMove(c.n.NC, id, "spot is back"); err != nil {
		t.Fatal(err)
	}
	c.waitState(t, id, queue.StateSucceeded, 60*time.Second)

	attempts := c.attempts(t, id)
	if len(attempts) != 2 || attempts[0].Pool != testPool.Pool || attempts[0].Outcome != queue.OutcomeMoved ||
		attempts[1].Pool != spotPool.Pool || attempts[1].Outcome != queue.OutcomeSucceeded {
		t.Fatalf("want attempt 1 moved from %s and attempt 2 succeeded on %s, got %+v", testPool.Pool, spotPool.Pool, attempts)
	}
	job, err := c.store.Job(ctx, id)
	if err != nil || job.Errors != 0 || job.Preemptions != 0 {
		t.Fatalf("a move counts as neither an error nor a preemption, got %+v, %v", job, err)
	}
	var last *queue.Checkpoint
	for _, cp := range c.checkpoints(t, id) {
		if cp.Attempt == 1 {
			last = &cp
		}
	}
	if last == nil {
		t.Fatal("attempt 1 recorded no checkpoint")
	}
	k := c.checkpointStep(t, *last)
	logs := c.logs(t, id)
	if !strings.Contains(logs, fmt.Sprintf("notice at step %d\n", k)) || !strings.Contains(logs, fmt.Sprintf("start attempt=2 resumed=1 step=%d\n", k)) {
		t.Fatalf("attempt 1 must save a final checkpoint on the move (step %d) and attempt 2 resume from it; logs:\n%s", k, logs)
	}
}
