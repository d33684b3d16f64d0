package control_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
)

// announced reads every message of the instance stream on subject, in
// stream order.
func announced(t *testing.T, js jetstream.JetStream, subject string) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, queue.StreamInstances)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	for _, n := range info.State.Subjects {
		want += n
	}
	var out [][]byte
	if want == 0 {
		return out
	}
	c, err := js.OrderedConsumer(ctx, queue.StreamInstances, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	for uint64(len(out)) < want {
		msg, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, msg.Data())
	}
	return out
}

// sameAsRecorded fails t unless the instance's announcements are its
// recorded events, in order, as the same JSON documents.
func sameAsRecorded(t *testing.T, s *store.Store, js jetstream.JetStream, in *queue.Instance) []queue.InstanceEvent {
	t.Helper()
	recorded, err := s.InstanceEvents(context.Background(), in.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := announced(t, js, queue.InstanceSubject(in.Pool, in.ID))
	if len(got) != len(recorded) {
		t.Fatalf("instance %s: %d events announced, %d recorded:\n%s\n%+v", in.ID, len(got), len(recorded), got, recorded)
	}
	for i, ev := range recorded {
		want, _ := json.Marshal(ev)
		if string(got[i]) != string(want) {
			t.Fatalf("instance %s, event %d: announced %s, recorded %s", in.ID, i, got[i], want)
		}
	}
	return recorded
}

func TestInstanceEventsAnnouncedAfterAFailedPublishOnceInOrderAndNeverTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	a := &control.InstanceAnnouncer{Store: s, JS: n.JS}
	// JetStream cannot store announcements: the instance stream is gone.
	if err := n.JS.DeleteStream(ctx, queue.StreamInstances); err != nil {
		t.Fatal(err)
	}
	in, err := s.RecordInstance(ctx, queue.NewInstance{ID: "gq-1", Provider: "sim", Pool: "od", Project: "vision", ClientToken: "gq-1",
		Slots: 1, PriceMicros: 100_000, Currency: "EUR", Billing: queue.BillPerSecond, Message: "2 jobs waiting"})
	if err != nil {
		t.Fatal(err)
	}
	launched := time.Now()
	for _, c := range []queue.InstanceChange{
		{ID: in.ID, From: []queue.InstanceState{queue.InstanceRequested}, To: queue.InstancePending, ProviderID: "p-1", LaunchedAt: &launched},
		{ID: in.ID, From: []queue.InstanceState{queue.InstancePending}, To: queue.InstanceReady},
	} {
		if _, err := s.ChangeInstance(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	// A change that finds the instance moved records nothing, so nothing
	// is announced for it.
	if _, err := s.ChangeInstance(ctx, queue.InstanceChange{ID: in.ID, From: []queue.InstanceState{queue.InstancePending}, To: queue.InstanceFailed}); err == nil {
		t.Fatal("a change from a state the instance left must fail")
	}
	if got, err := a.Pass(ctx); err == nil || got != 0 {
		t.Fatalf("a pass without the stream announced %d events, err %v; want 0 and an error", got, err)
	}
	pending, err := s.UnannouncedInstanceEvents(ctx, 10)
	if err != nil || len(pending) != 3 {
		t.Fatalf("after a failed publish %d events wait to be announced (%v), want all 3", len(pending), err)
	}

	// The stream is back: the next pass announces the three, in order.
	if err := queue.EnsureStreams(ctx, n.JS, queue.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Pass(ctx); err != nil || got != 3 {
		t.Fatalf("pass: %d announced, %v; want 3", got, err)
	}
	evs := sameAsRecorded(t, s, n.JS, in)
	for i, want := range []queue.InstanceState{queue.InstanceRequested, queue.InstancePending, queue.InstanceReady} {
		if evs[i].State != want || evs[i].InstanceID != "gq-1" || evs[i].Pool != "od" || evs[i].Project != "vision" {
			t.Fatalf("event %d: %+v, want %s of gq-1 in od for vision", i, evs[i], want)
		}
	}
	if got, err := a.Pass(ctx); err != nil || got != 0 {
		t.Fatalf("a second pass announced %d (%v); want none", got, err)
	}

	// A server that died after publishing and before marking repeats its
	// publishes: JetStream keeps the first of each.
	if _, err := s.DB.ExecContext(ctx, `UPDATE instance_events SET announced = false`); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Pass(ctx); err != nil || got != 3 {
		t.Fatalf("repeating: %d, %v", got, err)
	}
	sameAsRecorded(t, s, n.JS, in)
}

func TestInstanceAnnouncerPublishesAChangeAsSoonAsTheStoreRecordsIt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	// A pass every hour: only the store's word starts one.
	a := &control.InstanceAnnouncer{Store: s, JS: n.JS, Interval: time.Hour}
	s.InstanceSink = a
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	in, err := s.RecordInstance(ctx, queue.NewInstance{ID: "gq-2", Provider: "sim", Pool: "od", ClientToken: "gq-2",
		Slots: 1, PriceMicros: 1, Currency: "EUR", Billing: queue.BillPerSecond})
	if err != nil {
		t.Fatal(err)
	}
	// The first pass ran at start; this change is announced only when the
	// store says so.
	time.Sleep(200 * time.Millisecond)
	if _, err := s.ChangeInstance(ctx, queue.InstanceChange{ID: in.ID, From: []queue.InstanceState{queue.InstanceRequested},
		To: queue.InstanceFailed, Reason: "no capacity"}); err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, 5*time.Second, "both events announced", func() bool {
		return len(announced(t, n.JS, queue.InstanceSubject("od", "gq-2"))) == 2
	})
	sameAsRecorded(t, s, n.JS, in)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
