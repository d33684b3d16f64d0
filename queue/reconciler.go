package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Reconciler repairs gaps between PostgreSQL and JetStream: a job recorded
// but never placed, or placed (or running on a lost worker) with no run
// message left in its pool's stream, is placed or published again. Duplicate
// run messages are harmless: a claim succeeds only once per lease.
type Reconciler struct {
	JS     jetstream.JetStream
	Store  *Store
	Placer Placer
	Logger *slog.Logger
	// Interval between passes. Default 30s.
	Interval time.Duration
	// PendingAge is how long a job may stay pending before the reconciler
	// places it. Default 1m.
	PendingAge time.Duration
	// PlacedAge is how long a placed job may go unclaimed (or a running job
	// stay past its lease) before its run message is checked. Default 2m.
	PlacedAge time.Duration
}

// Run reconciles every Interval until ctx ends.
func (r *Reconciler) Run(ctx context.Context) error {
	if r.Interval == 0 {
		r.Interval = 30 * time.Second
	}
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		if n, err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.Logger.Warn("reconciling", "err", err)
		} else if n > 0 {
			r.Logger.Info("reconciled jobs", "repaired", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Pass runs one reconciliation and returns how many jobs it repaired.
func (r *Reconciler) Pass(ctx context.Context) (int, error) {
	pendingAge, placedAge := r.PendingAge, r.PlacedAge
	if pendingAge == 0 {
		pendingAge = time.Minute
	}
	if placedAge == 0 {
		placedAge = 2 * time.Minute
	}
	jobs, err := r.Store.ListUnsettled(ctx, pendingAge, placedAge, 1000)
	if err != nil {
		return 0, err
	}
	stream, err := r.JS.Stream(ctx, StreamRun)
	if err != nil {
		return 0, err
	}
	repaired := 0
	var pending []*Job
	var orders []RunOrder
	for _, u := range jobs {
		if u.State == StatePending {
			j, err := r.Store.Job(ctx, u.ID)
			if err != nil {
				return repaired, err
			}
			pending = append(pending, j)
			continue
		}
		_, err := stream.GetLastMsgForSubject(ctx, RunSubject(u.Pool, u.ID.String()))
		if err == nil {
			continue
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return repaired, fmt.Errorf("looking up the run message of job %s: %w", u.ID, err)
		}
		p, err := r.Store.LatestPlacement(ctx, u.ID)
		if err != nil {
			return repaired, err
		}
		orders = append(orders, orderFor(u.ID, *p))
	}
	if len(pending) > 0 {
		s := &Scheduler{JS: r.JS, Store: r.Store, Placer: r.Placer, Logger: r.Logger}
		if err := s.placeAndPublish(ctx, pending); err != nil {
			return repaired, err
		}
		repaired += len(pending)
	}
	suffix := fmt.Sprintf(":r%d", time.Now().UnixNano())
	if err := publishOrders(ctx, r.JS, orders, suffix); err != nil {
		return repaired, err
	}
	return repaired + len(orders), nil
}
