package control_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
)

// A deadline job running on on-demand while spot was down is asked to move
// to spot once spot is back and the strategy expects it to last (its runs
// of capacity have lasted hours, its outages minutes), once per attempt,
// on the subject its worker listens to; while spot is down it is left
// where it is, and so is one whose attempt has recorded no checkpoint.
func TestRebalancerAsksADeadlineJobOnOnDemandToMoveOnceSpotIsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	s.HistoryRetention = store.PoolHistoryRetention{Tick: 10 * time.Minute, Fine: 10 * time.Minute}
	t0 := time.Now().Truncate(10 * time.Minute)
	at := t0.Add(-48 * time.Hour)
	observe := func(up bool, ticks int) {
		for range ticks {
			if err := s.ObservePools(ctx, at, []queue.PoolObservation{{Pool: "sim-a-spot", Up: up}}); err != nil {
				t.Fatal(err)
			}
			at = at.Add(10 * time.Minute)
		}
	}
	for at.Before(t0.Add(-210 * time.Minute)) {
		observe(true, 20) // up for 200 minutes, down for 10, for two days
		observe(false, 1)
	}
	observe(false, int(t0.Sub(at)/(10*time.Minute))+1) // down since

	spec := mustSpec(t, "command: [/bin/true]\nplacement: {tier: spot-then-on-demand}\nexpected_duration: 8h\ndeadline: "+
		time.Now().Add(11*time.Hour).Format(time.RFC3339)+"\n")
	// running records a job running on on-demand for an hour, with a
	// checkpoint of its attempt when saved is set.
	running := func(saved bool) uuid.UUID {
		t.Helper()
		jobs, err := s.RecordJobs(ctx, []queue.NewJob{{ID: uuid.New(), Spec: spec}})
		if err != nil {
			t.Fatal(err)
		}
		id := jobs[0].ID
		od := queue.Placement{Version: 1, Pool: "sim-a-od", Region: "eu-1", PriceMicros: 1_000_000, Currency: "EUR"}
		if _, err := s.RecordPlacements(ctx, []queue.PlacedJob{{JobID: id, Placement: od}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Claim(ctx, queue.ClaimRequest{JobID: id, PlacementVersion: 1, Lease: time.Hour, WorkerID: "w", Host: "h", PID: 1, Pool: "sim-a-od"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB.Exec(`UPDATE attempts SET started_at = now() - interval '1 hour' WHERE job_id = $1`, id); err != nil {
			t.Fatal(err)
		}
		if saved {
			if _, err := s.RecordCheckpoint(ctx, id, 1, queue.ArchiveRecord{Bytes: 1, SHA256: "x", Region: "eu-1", StoreURI: "u-" + id.String()}); err != nil {
				t.Fatal(err)
			}
		}
		return id
	}
	id := running(true)
	running(false) // never asked: no checkpoint to resume from

	moves := make(chan *nats.Msg, 10)
	sub, err := n.NC.ChanSubscribe(queue.MoveSubject("*"), moves)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // test ends
	offers := &switchable{}
	pass := func(clock time.Time) {
		t.Helper()
		p := &control.PolicyPlacer{Sources: []adapters.OfferSource{offers}, History: s, Checkpoints: s.Checkpoints,
			Now: func() time.Time { return clock }}
		r := &control.Rebalancer{Store: s, Placer: p, NATS: n.NC}
		for range 2 { // the second pass asks nothing more
			if err := r.Pass(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	none := func(when string) {
		t.Helper()
		select {
		case m := <-moves:
			t.Fatalf("%s a job was asked to move: %s %v", when, m.Subject, m.Header)
		case <-time.After(300 * time.Millisecond):
		}
	}
	pass(t0.Add(time.Second))
	none("with spot down")

	observe(true, 3) // spot back for 30 minutes
	offers.set(true)
	pass(at.Add(time.Second))
	select {
	case m := <-moves:
		reason := m.Header.Get(queue.HeaderMove)
		if m.Subject != queue.MoveSubject(id.String()) || !strings.Contains(reason, "advises spot") || !strings.Contains(reason, "moving to sim-a-spot") {
			t.Fatalf("want a move request on the job's subject naming the advice and the pool, got %s %v", m.Subject, m.Header)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no move request reached the job's worker with spot back")
	}
	// The job that has saved no checkpoint is not asked, nor the other
	// one again in the same attempt.
	none("a second time, or the job without a checkpoint,")
}
