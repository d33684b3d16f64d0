package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Placer decides where a job runs. The policy package's engine implements it;
// the scheduler needs nothing else from placement. prior is nil on the first
// placement; a re-placement passes the current placement and the attempts so
// far, so that pools that preempted the job can be avoided.
type Placer interface {
	Place(ctx context.Context, job *Job, prior *Prior) (Placement, error)
}

// Prior is what a re-placement knows about a job's past.
type Prior struct {
	Placement Placement
	Attempts  []Attempt
}

// RejectionError is returned by a Placer when no placement satisfies the
// job; the job is rejected with Reason.
type RejectionError struct {
	Reason string
}

func (e *RejectionError) Error() string { return e.Reason }

// RunOrder is the body of a run message: which placement of which job a
// worker of the pool should claim, and the residency it must respect.
type RunOrder struct {
	JobID            uuid.UUID `json:"job_id"`
	PlacementVersion int       `json:"placement_version"`
	Pool             string    `json:"pool"`
	Region           string    `json:"region"`
	Residency        string    `json:"residency,omitempty"`
	Countries        []string  `json:"countries,omitempty"`
}

// Scheduler consumes submissions, records them, places them and publishes
// them to their pools. Each step is idempotent, so a scheduler killed at any
// moment loses nothing and, restarted, publishes nothing twice: a redelivered
// submission finds its job already recorded, and a republished run message
// carries the same Nats-Msg-Id.
type Scheduler struct {
	JS     jetstream.JetStream
	Store  *Store
	Placer Placer
	Logger *slog.Logger
	// BatchSize is the most submissions handled in one transaction. Default 256.
	BatchSize int
}

// Run consumes submissions until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	if s.BatchSize == 0 {
		s.BatchSize = 256
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	cons, err := s.JS.Consumer(ctx, StreamSubmit, SchedulerConsumer)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	msgs := make(chan jetstream.Msg, s.BatchSize)
	cc, err := cons.Consume(func(m jetstream.Msg) { msgs <- m }, jetstream.PullMaxMessages(s.BatchSize))
	if err != nil {
		return fmt.Errorf("scheduler: consuming submissions: %w", err)
	}
	defer cc.Stop()
	for {
		var batch []jetstream.Msg
		select {
		case <-ctx.Done():
			return nil
		case m := <-msgs:
			batch = append(batch, m)
		}
	drain:
		for len(batch) < s.BatchSize {
			select {
			case m := <-msgs:
				batch = append(batch, m)
			default:
				break drain
			}
		}
		if err := s.handle(ctx, batch); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.Logger.Error("scheduling a batch of submissions; they will be redelivered", "count", len(batch), "err", err)
			for _, m := range batch {
				m.NakWithDelay(time.Second) //nolint:errcheck // redelivered after AckWait anyway
			}
		}
	}
}

// handle records, places and publishes a batch, then acks it.
func (s *Scheduler) handle(ctx context.Context, batch []jetstream.Msg) error {
	var valid []jetstream.Msg
	var jobs []NewJob
	for _, m := range batch {
		spec, err := ParseSpec(m.Data())
		var id uuid.UUID
		if err == nil {
			id, err = submissionID(m, spec)
		}
		if err != nil {
			// Nothing is recorded for a malformed raw publish; the client
			// library validates before publishing, so only raw publishers
			// meet this, and they see it in the scheduler's log.
			s.Logger.Warn("refusing a malformed submission", "subject", m.Subject(), "err", err)
			if err := m.Term(); err != nil {
				return fmt.Errorf("terminating a malformed submission: %w", err)
			}
			continue
		}
		valid = append(valid, m)
		jobs = append(jobs, NewJob{ID: id, Spec: spec})
	}
	if len(jobs) == 0 {
		return nil
	}
	// Recording, placing and rejecting the batch is one transaction.
	recorded, placed, err := s.Store.RecordAndPlace(ctx, jobs, s.decide)
	if err != nil {
		return err
	}
	if err := s.publish(ctx, recorded, placed); err != nil {
		return err
	}
	for _, m := range valid {
		if err := m.Ack(); err != nil {
			s.Logger.Warn("acknowledging a submission; it will be redelivered and found recorded", "err", err)
		}
	}
	return nil
}

// decide places the pending jobs of a batch and collects the rejections.
func (s *Scheduler) decide(ctx context.Context, jobs []*Job) ([]PlacedJob, map[uuid.UUID]string, error) {
	ctx = withSpendCache(ctx)
	var placed []PlacedJob
	rejected := map[uuid.UUID]string{}
	for _, j := range jobs {
		if j.State != StatePending {
			continue
		}
		p, err := s.Placer.Place(ctx, j, nil)
		var rej *RejectionError
		if errors.As(err, &rej) {
			rejected[j.ID] = rej.Reason
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("placing job %s: %w", j.ID, err)
		}
		p.Version = j.PlacementVersion + 1
		placed = append(placed, PlacedJob{JobID: j.ID, Placement: p})
	}
	return placed, rejected, nil
}

// publish sends the run messages of the placements that just took effect and
// of jobs found already placed (a submission redelivered after a crash,
// whose publish may not have happened).
func (s *Scheduler) publish(ctx context.Context, recorded []*Job, placed []PlacedJob) error {
	orders := make([]RunOrder, 0, len(placed))
	for _, p := range placed {
		orders = append(orders, orderFor(p.JobID, p.Placement))
	}
	for _, j := range recorded {
		if j.State != StatePlaced {
			continue
		}
		p, err := s.Store.LatestPlacement(ctx, j.ID)
		if err != nil {
			return err
		}
		orders = append(orders, orderFor(j.ID, *p))
	}
	return publishOrders(ctx, s.JS, orders, "")
}

// placeAndPublish places pending jobs found by the reconciler, records the
// placements and rejections, and publishes the run messages.
func (s *Scheduler) placeAndPublish(ctx context.Context, jobs []*Job) error {
	placed, rejected, err := s.decide(ctx, jobs)
	if err != nil {
		return err
	}
	for id, reason := range rejected {
		if err := s.Store.Reject(ctx, id, reason); err != nil {
			return err
		}
	}
	done, err := s.Store.RecordPlacements(ctx, placed)
	if err != nil {
		return err
	}
	return s.publish(ctx, nil, done)
}

func orderFor(id uuid.UUID, p Placement) RunOrder {
	return RunOrder{JobID: id, PlacementVersion: p.Version, Pool: p.Pool, Region: p.Region, Residency: p.Residency, Countries: p.Countries}
}

// publishOrders publishes run messages and waits until JetStream stored them
// all. The Nats-Msg-Id is job:placement (plus suffix when the reconciler must
// publish again after the dedupe window).
func publishOrders(ctx context.Context, js jetstream.JetStream, orders []RunOrder, suffix string) error {
	futures := make([]jetstream.PubAckFuture, 0, len(orders))
	for _, o := range orders {
		body, err := json.Marshal(o)
		if err != nil {
			return err
		}
		msg := nats.NewMsg(RunSubject(o.Pool, o.JobID.String()))
		msg.Data = body
		msg.Header.Set(nats.MsgIdHdr, o.JobID.String()+":"+strconv.Itoa(o.PlacementVersion)+suffix)
		msg.Header.Set(HeaderJobID, o.JobID.String())
		msg.Header.Set(HeaderPlacement, strconv.Itoa(o.PlacementVersion))
		f, err := js.PublishMsgAsync(msg)
		if err != nil {
			return fmt.Errorf("dispatching job %s: %w", o.JobID, err)
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("dispatching job %s: %w", orders[i].JobID, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
