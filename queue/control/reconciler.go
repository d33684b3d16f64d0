package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
)

// ReconcilerStore is what the reconciler needs from the system of record.
type ReconcilerStore interface {
	ListUnsettled(ctx context.Context, pendingAge, placedAge time.Duration, limit int) ([]queue.Unsettled, error)
	Job(ctx context.Context, id uuid.UUID) (*queue.Job, error)
	LatestPlacement(ctx context.Context, id uuid.UUID) (*queue.Placement, error)
	CommitPlacements(ctx context.Context, d queue.Decided) ([]queue.PlacedJob, error)
}

// ReconcilerStreams is what the reconciler needs from JetStream: the run
// stream to look messages up in and to publish to.
type ReconcilerStreams interface {
	RunPublisher
	Stream(ctx context.Context, stream string) (jetstream.Stream, error)
}

// Reconciler repairs gaps between PostgreSQL and JetStream: a job recorded
// but never placed, or placed (or running on a lost worker) with no run
// message left in its pool's stream, is placed or published again. Duplicate
// run messages are harmless: a claim succeeds only once per lease.
type Reconciler struct {
	JS     ReconcilerStreams
	Store  ReconcilerStore
	Placer Placer
	// Logger; default slog.Default().
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

// WithDefaults returns r with every unset default filled in.
func (r Reconciler) WithDefaults() Reconciler {
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	if r.Interval == 0 {
		r.Interval = 30 * time.Second
	}
	if r.PendingAge == 0 {
		r.PendingAge = time.Minute
	}
	if r.PlacedAge == 0 {
		r.PlacedAge = 2 * time.Minute
	}
	return r
}

func (r Reconciler) validate() error {
	switch {
	case r.JS == nil:
		return errors.New("reconciler.js: must be set")
	case r.Store == nil:
		return errors.New("reconciler.store: must be set")
	case r.Interval < 0:
		return fmt.Errorf("reconciler.interval: must not be negative, got %s", r.Interval)
	case r.PendingAge < 0:
		return fmt.Errorf("reconciler.pending_age: must not be negative, got %s", r.PendingAge)
	case r.PlacedAge < 0:
		return fmt.Errorf("reconciler.placed_age: must not be negative, got %s", r.PlacedAge)
	}
	return nil
}

// Run reconciles every Interval until ctx ends.
func (r *Reconciler) Run(ctx context.Context) error {
	cfg := r.WithDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	every(ctx, cfg.Interval, func() {
		n, err := cfg.Pass(ctx)
		var skipped *SkippedJobsError
		switch {
		case errors.As(err, &skipped):
			cfg.Logger.Warn("reconciled jobs, skipping some", "repaired", n, "skipped", len(skipped.Jobs), "err", err)
		case err != nil && ctx.Err() == nil:
			cfg.Logger.Warn("reconciling", "repaired", n, "err", err)
		case n > 0:
			cfg.Logger.Info("reconciled jobs", "repaired", n)
		}
	})
	return nil
}

// SkippedJobsError reports the jobs a reconciliation pass could not repair;
// the pass repaired the others.
type SkippedJobsError struct {
	// Jobs maps each skipped job to why.
	Jobs map[uuid.UUID]error
}

func (e *SkippedJobsError) Error() string {
	ids := slices.SortedFunc(maps.Keys(e.Jobs), func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf("job %s: %v", id, e.Jobs[id]))
	}
	return fmt.Sprintf("skipped %d jobs: %s", len(ids), strings.Join(parts, "; "))
}

// Pass runs one reconciliation and returns how many jobs it repaired. A job
// that cannot be looked at or repaired is skipped, not the whole pass: the
// pass repairs the others and reports the skipped ones in a
// *SkippedJobsError.
func (r *Reconciler) Pass(ctx context.Context) (int, error) {
	cfg := r.WithDefaults()
	if err := cfg.validate(); err != nil {
		return 0, err
	}
	jobs, err := cfg.Store.ListUnsettled(ctx, cfg.PendingAge, cfg.PlacedAge, 1000)
	if err != nil {
		return 0, err
	}
	stream, err := cfg.JS.Stream(ctx, queue.StreamRun)
	if err != nil {
		return 0, err
	}
	repaired := 0
	skipped := map[uuid.UUID]error{}
	var pending []*queue.Job
	var orders []queue.RunOrder
	for _, u := range jobs {
		if ctx.Err() != nil {
			return repaired, ctx.Err()
		}
		if u.State == queue.StatePending {
			j, err := cfg.Store.Job(ctx, u.ID)
			if err != nil {
				skipped[u.ID] = fmt.Errorf("reading the job: %w", err)
				continue
			}
			pending = append(pending, j)
			continue
		}
		_, err := stream.GetLastMsgForSubject(ctx, queue.RunSubject(u.Pool, u.ID.String()))
		if err == nil {
			continue
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			skipped[u.ID] = fmt.Errorf("looking up its run message: %w", err)
			continue
		}
		p, err := cfg.Store.LatestPlacement(ctx, u.ID)
		if err != nil {
			skipped[u.ID] = fmt.Errorf("reading its placement: %w", err)
			continue
		}
		orders = append(orders, orderFor(u.ID, *p))
	}
	if len(pending) > 0 {
		if cfg.Placer == nil {
			return repaired, errors.New("reconciler.placer: must be set to place pending jobs")
		}
		d, err := decide(ctx, cfg.Placer, pending)
		if err != nil {
			return repaired, err
		}
		done, err := cfg.Store.CommitPlacements(ctx, d)
		if err != nil {
			return repaired, err
		}
		if err := publishPlaced(ctx, cfg.JS, cfg.Store, nil, done); err != nil {
			return repaired, err
		}
		repaired += len(pending)
	}
	suffix := fmt.Sprintf(":r%d", time.Now().UnixNano())
	if err := publishOrders(ctx, cfg.JS, orders, suffix); err != nil {
		return repaired, err
	}
	repaired += len(orders)
	if len(skipped) > 0 {
		return repaired, &SkippedJobsError{Jobs: skipped}
	}
	return repaired, nil
}
