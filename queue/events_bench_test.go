package queue

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkAnnounceEvents announces job events through an EventPublisher to
// the events stream of an embedded server, as the control plane does, until
// the stream has stored them all: its ns/op is the cost of one event to the
// publisher and the server together (both in this process). "default"
// writes each event to the stream's file as it arrives, "async" (the events
// stream's mode on a single server) lets the server batch the writes, and
// "default, acknowledged" publishes each event with a PubAck awaited
// asynchronously, as events were announced before.
func BenchmarkAnnounceEvents(b *testing.B) {
	for _, c := range []struct {
		name  string
		mode  jetstream.PersistModeType
		acked bool
	}{{"default", jetstream.DefaultPersistMode, false}, {"async", jetstream.AsyncPersistMode, false}, {"default, acknowledged", jetstream.DefaultPersistMode, true}} {
		mode := c.mode
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			srv, err := StartEmbeddedNATS(b.TempDir(), 0)
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Stop()
			nc, err := nats.Connect(srv.ControlURL())
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				b.Fatal(err)
			}
			st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: StreamEvents, Subjects: []string{EventSubject("*"), ReplaceSubject("*")},
				Storage: jetstream.FileStorage, MaxMsgsPerSubject: 1000, PersistMode: mode})
			if err != nil {
				b.Fatal(err)
			}
			p := &EventPublisher{NATS: nc}
			if c.acked {
				p.NATS = asyncPublisher{js}
			}
			batch := make([]Event, 64)
			for i := range batch {
				batch[i] = Event{JobID: uuid.New(), State: StateRunning, Attempt: 1, Message: "running on pool bench", At: time.Now()}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for sent := 0; sent < b.N; sent += len(batch) {
				p.Announce(ctx, batch[:min(len(batch), b.N-sent)])
			}
			for {
				info, err := st.Info(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if info.State.LastSeq >= uint64(b.N) {
					break
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

// asyncPublisher publishes through JetStream, awaiting each PubAck
// asynchronously.
type asyncPublisher struct{ js jetstream.JetStream }

func (a asyncPublisher) Publish(subject string, data []byte) error {
	_, err := a.js.PublishAsync(subject, data)
	return err
}
