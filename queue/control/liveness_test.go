package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// fenceCall is one FenceLost call a fenceRecorder saw.
type fenceCall struct {
	pool, worker string
	refs         []queue.AttemptRef
}

// fenceRecorder records the hand-backs the liveness monitor asks for and
// reports every attempt handed back.
type fenceRecorder struct {
	mu    sync.Mutex
	calls []fenceCall
}

func (f *fenceRecorder) FenceLost(_ context.Context, pool, worker string, refs []queue.AttemptRef, _ string) ([]queue.AttemptRef, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fenceCall{pool: pool, worker: worker, refs: refs})
	return refs, nil
}

func (f *fenceRecorder) seen() []fenceCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fenceCall(nil), f.calls...)
}

func publishBeat(t *testing.T, nc *nats.Conn, subjectPool string, b queue.Beat) {
	t.Helper()
	body, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(queue.AliveSubject(subjectPool), body); err != nil {
		t.Fatal(err)
	}
}

func TestLivenessHandsBackTheJobsOfASilentWorkerAndNaksTheirMessages(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	rec := &fenceRecorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&control.Liveness{NATS: n.NC, Store: rec, LostAfter: 500 * time.Millisecond}).Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	lostJob, liveJob := uuid.New(), uuid.New()
	lostReply := "$JS.ACK.GPUQ_RUN.pool-p.1.7.7.1700000000000000000.0"
	naks := make(chan string, 10)
	sub, err := n.NC.Subscribe("$JS.ACK.>", func(m *nats.Msg) { naks <- m.Subject + " " + string(m.Data) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // closing
	lost := queue.Beat{BeatSender: queue.BeatSender{Worker: "w1", Pool: "p"}, Held: []queue.HeldAttempt{{JobID: lostJob, Attempt: 1, Reply: lostReply}}}
	live := queue.Beat{BeatSender: queue.BeatSender{Worker: "w2", Pool: "p"}, Held: []queue.HeldAttempt{{JobID: liveJob, Attempt: 3, Reply: "$JS.ACK.GPUQ_RUN.pool-p.1.8.8.1700000000000000000.0"}}}
	// Beats the monitor must not believe: another pool's name, and a reply
	// subject outside the pool's consumer.
	forged := []struct {
		pool string
		beat queue.Beat
	}{
		{"p", queue.Beat{BeatSender: queue.BeatSender{Worker: "w3", Pool: "q"}, Held: []queue.HeldAttempt{{JobID: uuid.New(), Attempt: 1, Reply: "$JS.ACK.GPUQ_RUN.pool-q.1.9.9.1.0"}}}},
		{"p", queue.Beat{BeatSender: queue.BeatSender{Worker: "w4", Pool: "p"}, Held: []queue.HeldAttempt{{JobID: uuid.New(), Attempt: 1, Reply: "$JS.ACK.GPUQ_SUBMIT.scheduler.1.9.9.1.0"}}}},
		{"p", queue.Beat{BeatSender: queue.BeatSender{Worker: "w5", Pool: "p"}, Held: []queue.HeldAttempt{{JobID: uuid.New(), Attempt: 1, Reply: "gpuq.submit.other"}}}},
	}
	stopLive := make(chan struct{})
	liveDone := make(chan struct{})
	go func() {
		defer close(liveDone)
		tick := time.NewTicker(queue.BeatInterval)
		defer tick.Stop()
		for {
			select {
			case <-stopLive:
				return
			case <-tick.C:
				publishBeat(t, n.NC, "p", live)
			}
		}
	}()
	defer func() { close(stopLive); <-liveDone }()
	for range 5 {
		publishBeat(t, n.NC, "p", lost)
		for _, f := range forged {
			publishBeat(t, n.NC, f.pool, f.beat)
		}
		time.Sleep(queue.BeatInterval)
	}
	// w1 falls silent.
	select {
	case got := <-naks:
		if got != lostReply+" -NAK" {
			t.Fatalf("want the lost worker's message naked, got %q", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the silent worker's message was never naked")
	}
	// The live worker keeps beating through several detection times.
	time.Sleep(4 * 500 * time.Millisecond)
	calls := rec.seen()
	if len(calls) != 1 {
		t.Fatalf("want one hand-back (the silent worker's), got %+v", calls)
	}
	if c := calls[0]; c.pool != "p" || c.worker != "w1" || len(c.refs) != 1 || c.refs[0] != (queue.AttemptRef{JobID: lostJob, Attempt: 1}) {
		t.Fatalf("want w1's attempt 1 of job %s handed back, got %+v", lostJob, c)
	}
	select {
	case got := <-naks:
		t.Fatalf("only the lost worker's message may be naked, also got %q", got)
	default:
	}
}

func TestLivenessRefusesADetectionTimeShorterThanThreeBeats(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	err := (&control.Liveness{NATS: n.NC, Store: &fenceRecorder{}, LostAfter: queue.BeatInterval}).Run(context.Background())
	if err == nil {
		t.Fatal("want an error naming liveness.lost_after")
	}
	if got := err.Error(); len(got) < len("liveness.lost_after") || got[:len("liveness.lost_after")] != "liveness.lost_after" {
		t.Fatalf("want an error naming liveness.lost_after, got %q", got)
	}
}

// runLiveness runs a liveness monitor with a 500 ms detection time until
// t ends, and returns the subjects it naks, as they are published.
func runLiveness(t *testing.T, n *queuetest.NATS, store control.LivenessStore, claims *control.RecentClaims) <-chan string {
	t.Helper()
	naks := make(chan string, 10)
	sub, err := n.NC.Subscribe("$JS.ACK.>", func(m *nats.Msg) { naks <- m.Subject })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&control.Liveness{NATS: n.NC, Store: store, LostAfter: 500 * time.Millisecond, Claims: claims}).Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		sub.Unsubscribe() //nolint:errcheck // closing
	})
	return naks
}

// A worker lost between its claim and the next beat that would announce the
// attempt (a beat goes at most 20 ms after a claim when busy, up to a beat
// interval when idle) still has the attempt handed back: the worker service
// tells the monitor of every attempt it starts, with its run message's
// reply subject.
func TestLivenessHandsBackAnAttemptItsWorkerWasLostBeforeAnnouncing(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	rec := &fenceRecorder{}
	claims := &control.RecentClaims{}
	naks := runLiveness(t, n, rec, claims)
	reply := func(seq int) string {
		return fmt.Sprintf("$JS.ACK.GPUQ_RUN.pool-p.1.%d.%d.1700000000000000000.0", seq, seq)
	}
	idle := func(worker string) queue.Beat {
		return queue.Beat{BeatSender: queue.BeatSender{Worker: worker, Pool: "p"}}
	}

	// w1 beats holding nothing, claims a job and is killed before its next
	// beat; w2 claims a job and beats on (its beats stand for its claims
	// from then on) before it goes quiet holding nothing; w3 claims a job
	// but its beats are never heard (refused), so it is left to its lease
	// as before it claimed.
	lost1 := uuid.New()
	for range 3 {
		publishBeat(t, n.NC, "p", idle("w1"))
		publishBeat(t, n.NC, "p", idle("w2"))
		time.Sleep(queue.BeatInterval)
	}
	publishBeat(t, n.NC, "p", idle("w1"))
	claims.Started("p", "w1", queue.HeldAttempt{JobID: lost1, Attempt: 2, Reply: reply(1)})
	claims.Started("p", "w2", queue.HeldAttempt{JobID: uuid.New(), Attempt: 1, Reply: reply(2)})
	claims.Started("p", "w3", queue.HeldAttempt{JobID: uuid.New(), Attempt: 1, Reply: reply(3)})
	claims.Started("p", "w1", queue.HeldAttempt{JobID: uuid.New(), Attempt: 1}) // no reply: nothing to nak
	for range 4 {
		publishBeat(t, n.NC, "p", idle("w2"))
		time.Sleep(queue.BeatInterval)
	}

	select {
	case s := <-naks:
		if s != reply(1) {
			t.Fatalf("want the message of w1's unannounced attempt naked, got %s", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the message of w1's unannounced attempt was never naked")
	}
	// w2 goes quiet too, well after its claim: its beats announced what
	// it held.
	time.Sleep(4 * 500 * time.Millisecond)
	select {
	case s := <-naks:
		t.Fatalf("only unannounced attempts of lost workers may be naked, also got %s", s)
	default:
	}
	byWorker := map[string][]queue.AttemptRef{}
	for _, c := range rec.seen() {
		byWorker[c.worker] = append(byWorker[c.worker], c.refs...)
	}
	if want := []queue.AttemptRef{{JobID: lost1, Attempt: 2}}; len(byWorker) != 1 || !slices.Equal(byWorker["w1"], want) {
		t.Fatalf("hand-backs: got %v, want w1's %v alone", byWorker, want)
	}
}

// Through the worker service and the liveness monitor of one server, as
// `gpuq server` wires them: of a worker lost right after claiming, the
// attempt claimed with its run message's reply subject is handed back and
// the message naked; a reply subject outside the pool's consumer is never
// naked on the worker's word, and the claim that carried it still stands.
func TestLivenessHearsOfClaimsFromTheWorkerServiceAndNaksOnlyThePoolsMessages(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	claims := &control.RecentClaims{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pools := staticPools{"p": {Region: "r", Country: "DE"}}
	if _, err := (&control.WorkerService{NATS: n.NC, Store: s, Pools: pools, Claims: claims}).Start(ctx); err != nil {
		t.Fatal(err)
	}
	naks := runLiveness(t, n, s, claims)
	for range 3 {
		publishBeat(t, n.NC, "p", queue.Beat{BeatSender: queue.BeatSender{Worker: "w1", Pool: "p"}})
		time.Sleep(queue.BeatInterval)
	}
	ours, foreign := placedJob(t, s), placedJob(t, s)
	ourReply, foreignReply := "$JS.ACK.GPUQ_RUN.pool-p.1.5.5.1700000000000000000.0", "$JS.ACK.GPUQ_RUN.pool-q.1.6.6.1700000000000000000.0"
	a, b := claimOf(ours, "p"), claimOf(foreign, "p")
	a.Reply, b.Reply = ourReply, foreignReply
	r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{a, b}})
	if r.Error != nil || len(r.Claims) != 2 || r.Claims[0].Claimed == nil || r.Claims[1].Claimed == nil {
		t.Fatalf("want both claims to stand, got %+v", r)
	}
	// w1 falls silent before a beat announces either attempt.
	select {
	case got := <-naks:
		if got != ourReply {
			t.Fatalf("want %s naked, got %s", ourReply, got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lost worker's unannounced attempt was never handed back")
	}
	j, err := s.Job(context.Background(), ours)
	if err != nil || j.State != queue.StatePlaced || j.Preemptions != 1 {
		t.Fatalf("want the job handed back (placed, one preemption), got %+v, %v", j, err)
	}
	time.Sleep(2 * 500 * time.Millisecond)
	select {
	case got := <-naks:
		t.Fatalf("a reply subject outside the pool's consumer was naked: %s", got)
	default:
	}
	if j, err := s.Job(context.Background(), foreign); err != nil || j.State != queue.StateRunning || j.Attempt != 1 {
		t.Fatalf("the claim whose reply was left out: want it running under attempt 1, got %+v, %v", j, err)
	}
}

// The monitor counts each pool's live workers, and those whose latest beat
// says they take no work after host errors in a row, and lists them with
// what they hold; a paused worker that beats again without a pause takes
// work again.
func TestLivenessCountsEachPoolsLiveWorkersAndThosePausedAfterHostErrors(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	workers := &control.LiveWorkers{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&control.Liveness{NATS: n.NC, Store: &fenceRecorder{}, Workers: workers, LostAfter: 500 * time.Millisecond}).Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	until := time.Now().Add(time.Minute)
	paused := func(worker, pool string) queue.Beat {
		return queue.Beat{BeatSender: queue.BeatSender{Worker: worker, Pool: pool, PausedUntil: &until, PauseReason: "preparing directories: no space left on device"}}
	}
	beating := func(worker, pool string) queue.Beat {
		return queue.Beat{BeatSender: queue.BeatSender{Worker: worker, Pool: pool}}
	}
	counts := func(beats []queue.Beat, want map[string]control.PoolWorkers) {
		t.Helper()
		queuetest.Eventually(t, 10*time.Second, fmt.Sprintf("the monitor to count %v", want), func() bool {
			for _, b := range beats {
				publishBeat(t, n.NC, b.Pool, b)
			}
			n.NC.Flush() //nolint:errcheck // a lost flush is asked again
			got := workers.Pools()
			if len(got) != len(want) {
				return false
			}
			for pool, w := range want {
				if got[pool] != w {
					return false
				}
			}
			return true
		})
	}
	if workers.Pools() == nil {
		queuetest.Eventually(t, 10*time.Second, "the monitor to start counting", func() bool { return workers.Pools() != nil })
	}
	held := beating("w1", "p")
	held.Node = "node-1"
	held.Held = []queue.HeldAttempt{{JobID: uuid.New(), Attempt: 1, Reply: "$JS.ACK.GPUQ_RUN.pool-p.1.7.7.1700000000000000000.0"}}
	counts([]queue.Beat{held, paused("w2", "p"), paused("w3", "q")},
		map[string]control.PoolWorkers{"p": {Live: 2, Paused: 1}, "q": {Live: 1, Paused: 1}})
	// The list says who each is, what it holds and why it pauses.
	list := workers.List("p")
	if len(list) != 2 || list[0].Worker != "w1" || list[0].Node != "node-1" || list[0].Held != 1 || list[0].PausedUntil != nil ||
		list[1].Worker != "w2" || list[1].PausedUntil == nil || !list[1].PausedUntil.Equal(until) || list[1].PauseReason != "preparing directories: no space left on device" ||
		time.Since(list[0].LastBeatAt) > 10*time.Second {
		t.Fatalf("workers of p: %+v", list)
	}
	if all := workers.List(""); len(all) != 3 || all[2].Pool != "q" {
		t.Fatalf("every worker: %+v", all)
	}
	// w2's pause is over; w3 falls silent and is gone after LostAfter.
	counts([]queue.Beat{held, beating("w2", "p")},
		map[string]control.PoolWorkers{"p": {Live: 2}})
}
