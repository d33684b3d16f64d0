package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/gpuq/gpuq/queue"
	"github.com/nats-io/nats.go/jetstream"
)

// ReplacerConsumer is the durable consumer of job events the Replacer uses.
const ReplacerConsumer = "replacer"

// Replacer moves preempted jobs to their plan B. It follows, on a durable
// consumer, the events of jobs handed back by a preempted worker, or handed
// back to move at the Rebalancer's request (queue.ReplaceSubject, published
// besides each job's own event, so that it reads none of the others); for
// each, it asks the Placer for a
// re-placement with the job's preemption history, which avoids
// the pool that just preempted it and escalates spot-then-on-demand jobs to
// on-demand after repeated preemptions, inside the same residency and budget.
// A new pool gets a new placement version and a run message; the old pool's
// message turns stale and its workers drop it. A job already claimed again
// stays where it is.
type Replacer struct {
	JS     ReplacerStreams
	Store  ReplacerStore
	Placer Placer
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// ReplacerStore is what the replacer needs from the system of record.
type ReplacerStore interface {
	Job(ctx context.Context, id uuid.UUID) (*queue.Job, error)
	LatestPlacement(ctx context.Context, id uuid.UUID) (*queue.Placement, error)
	Attempts(ctx context.Context, id uuid.UUID) ([]queue.Attempt, error)
	CommitPlacements(ctx context.Context, d queue.Decided) ([]queue.PlacedJob, error)
}

// ReplacerStreams is what the replacer needs from JetStream: its durable
// consumer of job events and the run stream to publish to.
type ReplacerStreams interface {
	RunPublisher
	CreateOrUpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error)
}

// WithDefaults returns r with every unset default filled in.
func (r Replacer) WithDefaults() Replacer {
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	return r
}

func (r Replacer) validate() error {
	switch {
	case r.JS == nil:
		return errors.New("replacer.js: must be set")
	case r.Store == nil:
		return errors.New("replacer.store: must be set")
	case r.Placer == nil:
		return errors.New("replacer.placer: must be set")
	}
	return nil
}

// Run follows events until ctx ends.
func (r *Replacer) Run(ctx context.Context) error {
	*r = r.WithDefaults()
	if err := r.validate(); err != nil {
		return err
	}
	cons, err := r.JS.CreateOrUpdateConsumer(ctx, queue.StreamEvents, jetstream.ConsumerConfig{
		Durable: ReplacerConsumer, FilterSubject: queue.ReplaceSubject("*"), AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverNewPolicy, AckWait: 30 * time.Second, MaxAckPending: 1000,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("replacer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var ev queue.Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil || !ev.HandedBackPreempted() {
			m.Ack() //nolint:errcheck // not the replacer's business
			return
		}
		if err := r.Replace(ctx, ev); err != nil {
			r.Logger.Warn("re-placing a preempted job; will retry", "job", ev.JobID, "err", err)
			m.NakWithDelay(queue.RedeliveryDelay(m, time.Second, time.Minute)) //nolint:errcheck // redelivered after AckWait otherwise
			return
		}
		if err := m.Ack(); err != nil {
			r.Logger.Warn("acknowledging an event", "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("replacer: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	return nil
}

// Replace re-places the job of a preemption event if it is still waiting
// for the attempt after the one the event ended.
func (r *Replacer) Replace(ctx context.Context, ev queue.Event) error {
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	job, err := r.Store.Job(ctx, ev.JobID)
	if err != nil {
		return err
	}
	if job.State != queue.StatePlaced || job.Attempt != ev.Attempt {
		return nil
	}
	current, err := r.Store.LatestPlacement(ctx, job.ID)
	if err != nil {
		return err
	}
	attempts, err := r.Store.Attempts(ctx, job.ID)
	if err != nil {
		return err
	}
	next, err := r.Placer.Place(ctx, job, &Prior{Placement: *current, Attempts: attempts})
	var rej *queue.RejectionError
	if errors.As(err, &rej) {
		r.Logger.Info("no plan B for a preempted job; it stays in its pool", "job", job.ID, "pool", current.Pool, "reason", rej.Reason)
		return nil
	}
	if err != nil {
		return err
	}
	if next.Pool == current.Pool {
		return nil
	}
	next.Version = job.PlacementVersion + 1
	done, err := r.Store.CommitPlacements(ctx, queue.Decided{Placed: []queue.PlacedJob{{JobID: job.ID, Placement: next}}})
	if err != nil || len(done) == 0 {
		return err
	}
	r.Logger.Info("re-placed a job handed back", "job", job.ID, "outcome", ev.Outcome, "from", current.Pool, "to", next.Pool, "placement", next.Version)
	return publishOrders(ctx, r.JS, []queue.RunOrder{orderFor(job.ID, next)}, "")
}
