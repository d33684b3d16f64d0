package control

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
)

// The claims kept for the liveness monitor stay bounded: at most a beat's
// worth per worker, those a later beat announces are let go, and none
// outlives the monitor's detection time by much, whether or not the
// worker's beats are ever heard.
func TestRecentClaimsStayBounded(t *testing.T) {
	var c RecentClaims
	held := func(i int) queue.HeldAttempt {
		return queue.HeldAttempt{JobID: uuid.New(), Attempt: 1, Reply: "$JS.ACK.GPUQ_RUN.pool-p.1." + string(rune('0'+i%10)) + ".1.1.0"}
	}
	for i := range queue.MaxBeatHeld + 10 {
		c.Started("p", "w1", held(i))
	}
	c.Started("p", "w2", held(0))
	c.Started("p", "w3", queue.HeldAttempt{JobID: uuid.New(), Attempt: 1}) // no reply: nothing to nak, nothing kept
	if n := len(c.byWorker[recentWorker{"p", "w1"}]); n != queue.MaxBeatHeld {
		t.Fatalf("w1: %d claims kept, want %d", n, queue.MaxBeatHeld)
	}
	if _, ok := c.byWorker[recentWorker{"p", "w3"}]; ok {
		t.Fatal("a claim without a reply subject was kept")
	}
	// A beat heard now announces none of them yet; one heard later than
	// announcedWithin after them announces them all.
	c.heard("p", "w2", time.Now())
	if len(c.take("p", "w2")) != 1 {
		t.Fatal("a beat heard right after a claim let it go")
	}
	c.Started("p", "w2", held(1))
	c.heard("p", "w2", time.Now().Add(announcedWithin+time.Millisecond))
	if got := c.take("p", "w2"); len(got) != 0 {
		t.Fatalf("a beat heard after announcedWithin kept %v", got)
	}
	c.forget(time.Now().Add(time.Millisecond))
	if len(c.byWorker) != 0 {
		t.Fatalf("forget kept %d workers' claims", len(c.byWorker))
	}
	var none *RecentClaims
	none.Started("p", "w", held(0))
	none.heard("p", "w", time.Now())
	none.forget(time.Now())
	if none.take("p", "w") != nil {
		t.Fatal("a nil RecentClaims holds claims")
	}
}
