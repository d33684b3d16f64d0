package control

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
)

// RunPublisher is the part of JetStream that dispatches run messages.
type RunPublisher interface {
	PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error)
}

// placementReader finds a job's current placement.
type placementReader interface {
	LatestPlacement(ctx context.Context, id uuid.UUID) (*queue.Placement, error)
}

// publishPlaced sends the run messages of the placements that just took
// effect and of jobs found already placed (a submission redelivered after a
// crash, whose publish may not have happened).
func publishPlaced(ctx context.Context, js RunPublisher, store placementReader, recorded []*queue.Job, placed []queue.PlacedJob) error {
	orders := make([]queue.RunOrder, 0, len(placed))
	for _, p := range placed {
		orders = append(orders, orderFor(p.JobID, p.Placement))
	}
	for _, j := range recorded {
		if j.State != queue.StatePlaced {
			continue
		}
		p, err := store.LatestPlacement(ctx, j.ID)
		if err != nil {
			return err
		}
		orders = append(orders, orderFor(j.ID, *p))
	}
	return publishOrders(ctx, js, orders, "")
}

func orderFor(id uuid.UUID, p queue.Placement) queue.RunOrder {
	return queue.RunOrder{JobID: id, PlacementVersion: p.Version, Pool: p.Pool, Region: p.Region, Residency: p.Residency, Countries: p.Countries}
}

// publishOrders publishes run messages and waits until JetStream stored them
// all. The Nats-Msg-Id is job:placement (plus suffix when the reconciler must
// publish again after the dedupe window).
func publishOrders(ctx context.Context, js RunPublisher, orders []queue.RunOrder, suffix string) error {
	futures := make([]jetstream.PubAckFuture, 0, len(orders))
	for _, o := range orders {
		body, err := json.Marshal(o)
		if err != nil {
			return err
		}
		msg := nats.NewMsg(queue.RunSubject(o.Pool, o.JobID.String()))
		msg.Data = body
		msg.Header.Set(nats.MsgIdHdr, o.JobID.String()+":"+strconv.Itoa(o.PlacementVersion)+suffix)
		msg.Header.Set(queue.HeaderJobID, o.JobID.String())
		msg.Header.Set(queue.HeaderPlacement, strconv.Itoa(o.PlacementVersion))
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
