package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ReplacerConsumer is the durable consumer of job events the Replacer uses.
const ReplacerConsumer = "replacer"

// Replacer moves preempted jobs to their plan B. It follows job events on a
// durable consumer; for a job handed back by a preempted worker, it asks the
// Placer for a re-placement with the job's preemption history, which avoids
// the pool that just preempted it and escalates spot-then-on-demand jobs to
// on-demand after repeated preemptions, inside the same residency and budget.
// A new pool gets a new placement version and a run message; the old pool's
// message turns stale and its workers drop it. A job already claimed again
// stays where it is.
type Replacer struct {
	JS     jetstream.JetStream
	Store  *Store
	Placer Placer
	Logger *slog.Logger
}

// Run follows events until ctx ends.
func (r *Replacer) Run(ctx context.Context) error {
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	cons, err := r.JS.CreateOrUpdateConsumer(ctx, StreamEvents, jetstream.ConsumerConfig{
		Durable: ReplacerConsumer, FilterSubject: "gpuq.events.*", AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverNewPolicy, AckWait: 30 * time.Second, MaxAckPending: 1000,
	})
	if err != nil {
		return fmt.Errorf("replacer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var ev Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil || ev.Outcome != OutcomePreempted || ev.State != StatePlaced {
			m.Ack() //nolint:errcheck // not the replacer's business
			return
		}
		if err := r.Replace(ctx, ev); err != nil {
			r.Logger.Warn("re-placing a preempted job; will retry", "job", ev.JobID, "err", err)
			m.NakWithDelay(5 * time.Second) //nolint:errcheck // redelivered after AckWait otherwise
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
func (r *Replacer) Replace(ctx context.Context, ev Event) error {
	job, err := r.Store.Job(ctx, ev.JobID)
	if err != nil {
		return err
	}
	if job.State != StatePlaced || job.Attempt != ev.Attempt {
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
	var rej *RejectionError
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
	done, err := r.Store.RecordPlacements(ctx, []PlacedJob{{JobID: job.ID, Placement: next}})
	if err != nil || len(done) == 0 {
		return err
	}
	r.Logger.Info("re-placed a preempted job", "job", job.ID, "from", current.Pool, "to", next.Pool, "placement", next.Version)
	return publishOrders(ctx, r.JS, []RunOrder{orderFor(job.ID, next)}, "")
}
