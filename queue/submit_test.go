package queue

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// flakyPublisher fails its first publishes with err, then acknowledges.
type flakyPublisher struct {
	fail  int
	err   error
	calls int
	ids   []string
}

func (p *flakyPublisher) PublishMsg(_ context.Context, msg *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	p.calls++
	p.ids = append(p.ids, msg.Header.Get(nats.MsgIdHdr))
	if p.calls <= p.fail {
		return nil, p.err
	}
	return &jetstream.PubAck{Stream: StreamSubmit}, nil
}

func TestSubmitResendsWhenTheAcknowledgementIsLost(t *testing.T) {
	t.Parallel()
	spec, err := ParseSpec([]byte("command: [/bin/true]"))
	if err != nil {
		t.Fatal(err)
	}
	p := &flakyPublisher{fail: 2, err: nats.ErrTimeout}
	sub, err := Submit(context.Background(), p, spec)
	if err != nil {
		t.Fatal(err)
	}
	if p.calls != 3 || p.ids[0] != sub.JobID.String() || p.ids[2] != p.ids[0] {
		t.Fatalf("want 3 publishes with the same Nats-Msg-Id %s, got %d: %v", sub.JobID, p.calls, p.ids)
	}
	refused := &flakyPublisher{fail: 1, err: errors.New("nats: maximum payload exceeded")}
	if _, err := Submit(context.Background(), refused, spec); err == nil || refused.calls != 1 {
		t.Fatalf("a refusal must not be retried: %d calls, %v", refused.calls, err)
	}
}
