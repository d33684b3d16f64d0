package control

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/gpuq/gpuq/queue"
)

// PrunerStore is what the pruner needs from the system of record.
type PrunerStore interface {
	PruneCheckpoints(ctx context.Context, now time.Time) (int64, error)
	Garbage(ctx context.Context, max int) ([]queue.Garbage, error)
	ForgetGarbage(ctx context.Context, uris []string) error
}

// ArchiveDeleter deletes an archive from its store; a missing archive is
// not an error (workers.ObjectStore).
type ArchiveDeleter interface {
	Delete(ctx context.Context, uri string) error
}

// Pruner keeps checkpoint storage bounded: every Interval it removes from
// the record the checkpoints beyond each job's latest N and those of jobs
// finished longer ago than the retention (the store's queue.Storage), then
// deletes their archives from the stores and forgets them. An archive that
// cannot be deleted stays listed and is tried again on the next pass.
type Pruner struct {
	Store    PrunerStore
	Archives ArchiveDeleter
	// Interval between passes; default queue.Storage's.
	Interval time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// pruneBatch is how many archives one pass deletes at most per round.
const pruneBatch = 500

// Run prunes until ctx ends.
func (p *Pruner) Run(ctx context.Context) error {
	if p.Store == nil || p.Archives == nil {
		return errors.New("pruner: store and archives must be set")
	}
	interval := p.Interval
	if interval <= 0 {
		interval = queue.Storage{}.WithDefaults().PruneInterval
	}
	logger := p.Logger
	if logger == nil {
		logger = slog.Default()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := p.Pass(ctx); err != nil && ctx.Err() == nil {
			logger.Warn("pruning checkpoints; trying again next pass", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Pass prunes once and returns how many archives it deleted.
func (p *Pruner) Pass(ctx context.Context) (int, error) {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	if _, err := p.Store.PruneCheckpoints(ctx, now()); err != nil {
		return 0, err
	}
	deleted := 0
	var errs []error
	for {
		garbage, err := p.Store.Garbage(ctx, pruneBatch)
		if err != nil {
			return deleted, err
		}
		var gone []string
		for _, g := range garbage {
			if err := p.Archives.Delete(ctx, g.StoreURI); err != nil {
				errs = append(errs, err)
				continue
			}
			gone = append(gone, g.StoreURI)
		}
		if err := p.Store.ForgetGarbage(ctx, gone); err != nil {
			return deleted, err
		}
		deleted += len(gone)
		// A round that deleted nothing (all failing) or found less than a
		// full batch leaves the rest for the next pass.
		if len(garbage) < pruneBatch || len(gone) == 0 {
			return deleted, errors.Join(errs...)
		}
	}
}
