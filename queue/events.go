package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// EventPublisher announces recorded events on JetStream so that `gpuq wait`
// and `gpuq logs -f` follow jobs without polling PostgreSQL. PostgreSQL stays
// the truth: a lost announcement delays a watcher, it loses no state.
type EventPublisher struct {
	// NATS publishes each event as a plain NATS message on its subject,
	// which the events stream stores: no acknowledgement comes back, as
	// nothing waits on one (an announcement the stream could not store
	// costs a watcher a delay, never state), and the stream's ingest
	// queue and the connection bound what is in flight.
	NATS   EventConn
	Logger *slog.Logger
}

// Announce publishes events in order. An event of a job a preempted worker
// handed back is published on its ReplaceSubject too.
func (p *EventPublisher) Announce(ctx context.Context, events []Event) {
	for _, ev := range events {
		body, err := json.Marshal(ev)
		if err != nil {
			continue
		}
		id := ev.JobID.String()
		p.publish(EventSubject(id), body, ev)
		if ev.HandedBackPreempted() {
			p.publish(ReplaceSubject(id), body, ev)
		}
	}
}

func (p *EventPublisher) publish(subject string, body []byte, ev Event) {
	if err := p.NATS.Publish(subject, body); err != nil && p.Logger != nil {
		p.Logger.Warn("announcing job event", "subject", subject, "job", ev.JobID, "state", ev.State, "err", err)
	}
}

// EventConn is the part of a NATS connection that announces events.
type EventConn interface {
	Publish(subject string, data []byte) error
}

// OrderedConsumers is the part of JetStream that reads a stream in order:
// following events and reading logs need nothing else.
type OrderedConsumers interface {
	OrderedConsumer(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error)
}

// FollowEvents calls fn for each event of job published from now on,
// starting with the latest one already published, until fn returns false or
// ctx ends.
func FollowEvents(ctx context.Context, js OrderedConsumers, job uuid.UUID, fn func(Event) bool) error {
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{EventSubject(job.String())},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	}
	return followStream(ctx, js, StreamEvents, cfg, "events of job "+job.String(), func(msg jetstream.Msg) bool {
		var ev Event
		if err := json.Unmarshal(msg.Data(), &ev); err != nil {
			return true
		}
		return fn(ev)
	})
}

// followStream calls fn with each message an ordered consumer of stream
// delivers (what names them in an error), until fn returns false, the
// consumer's iterator closes or ctx ends.
func followStream(ctx context.Context, js OrderedConsumers, stream string, cfg jetstream.OrderedConsumerConfig, what string, fn func(jetstream.Msg) bool) error {
	c, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return fmt.Errorf("following %s: %w", what, err)
	}
	it, err := c.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return err
		}
		if !fn(msg) {
			return nil
		}
	}
}

// CancelSubject is where `gpuq cancel` tells a running worker to stop a job
// at once; the heartbeat's fencing catches a missed notice within a lease.
func CancelSubject(jobID string) string { return "gpuq.cancel." + jobID }

// CoreNATS is the plain NATS publishing that cancel notices use.
type CoreNATS interface {
	Publish(subject string, data []byte) error
	Flush() error
}

// HeaderStop on a message to CancelSubject asks the worker to stop the job
// as on a preemption notice (SIGTERM, the grace to save a final
// checkpoint) rather than at once, and to end it failed with the reason the
// header carries.
const HeaderStop = "Gpuq-Stop"

// MoveSubject is where the control plane asks a running job's worker to
// hand the job back as on a preemption notice (SIGTERM, the grace to save a
// final checkpoint), with outcome moved, so that it places the job
// elsewhere; HeaderMove carries the reason. A subject of its own, not
// CancelSubject: a worker that predates moves does not hear the request,
// where on CancelSubject it would take it for a cancel.
func MoveSubject(jobID string) string { return "gpuq.move." + jobID }

// HeaderMove carries a move request's reason.
const HeaderMove = "Gpuq-Move"

// StopPublisher is the plain NATS publishing that stop requests use.
type StopPublisher interface {
	PublishMsg(m *nats.Msg) error
	Flush() error
}

// NotifyStop asks any worker running job to stop it, saving a final
// checkpoint, for reason.
func NotifyStop(nc StopPublisher, job uuid.UUID, reason string) error {
	m := nats.NewMsg(CancelSubject(job.String()))
	m.Header.Set(HeaderStop, reason)
	if err := nc.PublishMsg(m); err != nil {
		return err
	}
	return nc.Flush()
}

// NotifyMove asks any worker running job to hand it back with a final
// checkpoint, for reason, so that it moves to another pool.
func NotifyMove(nc StopPublisher, job uuid.UUID, reason string) error {
	m := nats.NewMsg(MoveSubject(job.String()))
	m.Header.Set(HeaderMove, reason)
	if err := nc.PublishMsg(m); err != nil {
		return err
	}
	return nc.Flush()
}

// NotifyCancel tells any worker running job to stop it.
func NotifyCancel(nc CoreNATS, job uuid.UUID) error {
	if err := nc.Publish(CancelSubject(job.String()), nil); err != nil {
		return err
	}
	return nc.Flush()
}
