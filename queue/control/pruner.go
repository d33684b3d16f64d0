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

// ArchiveSweeper removes from the archive stores what was last written
// before a time and that no record names (workers.ObjectStore): archives
// whose record never came, and uploads that never finished.
type ArchiveSweeper interface {
	Sweep(ctx context.Context, before time.Time, recorded func(context.Context, []string) (map[string]bool, error)) (queue.SweepResult, error)
}

// ArchiveRecords reports which archive URIs a record still names.
type ArchiveRecords interface {
	RecordedArchives(ctx context.Context, uris []string) (map[string]bool, error)
}

// Pruner keeps checkpoint storage bounded: every Interval it removes from
// the record the checkpoints beyond each job's latest N and those of jobs
// finished longer ago than the retention (the store's queue.Storage), then
// deletes their archives from the stores and forgets them. An archive that
// cannot be deleted stays listed and is tried again on the next pass.
//
// With a Sweeper it also sweeps the stores when it starts and every
// OrphanAge/4 (at least Interval) after that: what a worker
// uploaded and never recorded (killed between the two, or during the
// upload) is deleted once it is OrphanAge old.
type Pruner struct {
	Store    PrunerStore
	Archives ArchiveDeleter
	// Interval between passes; default queue.Storage's.
	Interval time.Duration
	// Sweeper and Records find and remove orphaned archives; nil: no sweep.
	Sweeper ArchiveSweeper
	Records ArchiveRecords
	// OrphanAge is how old an unrecorded archive or an unfinished upload
	// is before a sweep removes it; default queue.Storage's.
	OrphanAge time.Duration
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
	var sweeps <-chan time.Time
	if p.Sweeper != nil && p.Records != nil {
		sweep := time.NewTicker(max(p.orphanAge()/4, interval))
		defer sweep.Stop()
		sweeps = sweep.C
		p.sweep(ctx, logger)
	}
	for {
		if _, err := p.Pass(ctx); err != nil && ctx.Err() == nil {
			logger.Warn("pruning checkpoints; trying again next pass", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-sweeps:
			p.sweep(ctx, logger)
		}
	}
}

func (p *Pruner) orphanAge() time.Duration {
	if p.OrphanAge > 0 {
		return p.OrphanAge
	}
	return queue.Storage{}.WithDefaults().OrphanAge
}

// Sweep removes from the stores what no record names and was last written
// longer than OrphanAge ago.
func (p *Pruner) Sweep(ctx context.Context) (queue.SweepResult, error) {
	if p.Sweeper == nil || p.Records == nil {
		return queue.SweepResult{}, errors.New("pruner: no sweeper")
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	return p.Sweeper.Sweep(ctx, now().Add(-p.orphanAge()), p.Records.RecordedArchives)
}

func (p *Pruner) sweep(ctx context.Context, logger *slog.Logger) {
	res, err := p.Sweep(ctx)
	if res.Archives > 0 || res.Partial > 0 {
		logger.Info("deleted orphaned archives", "unrecorded", res.Archives, "bytes", res.Bytes,
			"unfinished_uploads", res.Partial, "older_than", p.orphanAge())
	}
	if err != nil && ctx.Err() == nil {
		logger.Warn("sweeping orphaned archives; trying again next sweep", "err", err)
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
