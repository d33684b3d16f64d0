package httpapi

import (
	"context"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
)

// Notices is the plain NATS the API uses: cancel notices out, and job
// events in, to learn that a submission was recorded.
type Notices interface {
	Publish(subject string, data []byte) error
	Flush() error
	Subscribe(subject string, cb nats.MsgHandler) (*nats.Subscription, error)
}

// recordings tells submissions when their job's first event is announced:
// one subscription to every job's events serves all waiting submissions,
// where an ordered consumer per submission would cost a JetStream request
// each.
type recordings struct {
	mu      sync.Mutex
	waiting map[uuid.UUID][]chan struct{}
}

// start subscribes until ctx ends.
func (r *recordings) start(ctx context.Context, nc Notices) error {
	r.waiting = map[uuid.UUID][]chan struct{}{}
	sub, err := nc.Subscribe("gpuq.events.*", func(m *nats.Msg) {
		id, err := uuid.Parse(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
		if err != nil {
			return
		}
		r.mu.Lock()
		chans := r.waiting[id]
		delete(r.waiting, id)
		r.mu.Unlock()
		for _, c := range chans {
			close(c)
		}
	})
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { sub.Unsubscribe() }) //nolint:errcheck // shutting down
	return nil
}

// wait returns a channel closed when id's next event is announced, and a
// function that stops waiting.
func (r *recordings) wait(id uuid.UUID) (<-chan struct{}, func()) {
	c := make(chan struct{})
	r.mu.Lock()
	r.waiting[id] = append(r.waiting[id], c)
	r.mu.Unlock()
	return c, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		chans := r.waiting[id]
		for i, w := range chans {
			if w == c {
				r.waiting[id] = append(chans[:i], chans[i+1:]...)
				break
			}
		}
		if len(r.waiting[id]) == 0 {
			delete(r.waiting, id)
		}
	}
}
