package control_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue/control"
)

// quitter launches a "worker" that exits at once, as one with a bad flag or
// no NATS to reach does, and records when.
type quitter struct {
	mu       sync.Mutex
	launches []time.Time
}

func (q *quitter) Launch(ctx context.Context, pool local.PoolConfig) (*local.Instance, error) {
	q.mu.Lock()
	q.launches = append(q.launches, time.Now())
	q.mu.Unlock()
	return (&local.Launcher{Executable: "/bin/false"}).Start(ctx, pool.Pool, nil, nil)
}

func TestSupervisorBacksOffAWorkerThatExitsAtOnce(t *testing.T) {
	q := &quitter{}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	sup := &control.Supervisor{Launcher: q, Retry: 200 * time.Millisecond}
	if err := sup.Supervise(ctx, localPool); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	// 0.2, 0.4, 0.8, 1.6 s (±50 %) between launches: 4 to 6 in 4 s,
	// where relaunching at once would start hundreds.
	if n := len(q.launches); n < 4 || n > 6 {
		t.Fatalf("want 4–6 launches in 4 s of a worker exiting at once, got %d", n)
	}
	first, last := q.launches[1].Sub(q.launches[0]), q.launches[len(q.launches)-1].Sub(q.launches[len(q.launches)-2])
	if last <= first {
		t.Fatalf("the wait between relaunches must grow: first %s, last %s", first, last)
	}
}
