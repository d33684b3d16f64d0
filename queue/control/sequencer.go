package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
)

// SequencerStore is what the sequencer needs from the system of record.
type SequencerStore interface {
	WaitingSettled(ctx context.Context, limit int) ([]uuid.UUID, error)
	Job(ctx context.Context, id uuid.UUID) (*queue.Job, error)
	Dependencies(ctx context.Context, ids []uuid.UUID) ([]queue.Dependency, error)
	Release(ctx context.Context, d queue.Decided, cancel map[uuid.UUID]string) ([]queue.PlacedJob, error)
	LatestPlacement(ctx context.Context, id uuid.UUID) (*queue.Placement, error)
}

// Sequencer places the jobs that wait for others (spec.after) once those
// have all succeeded, and cancels those for which one of them ended
// otherwise, with the reason. It looks for them in PostgreSQL every
// Interval, so that a job is released whichever server recorded the end it
// waited for, and however many servers run a sequencer: each release is
// conditional on the job still waiting.
type Sequencer struct {
	JS     RunPublisher
	Store  SequencerStore
	Placer Placer
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Interval between looks. Default 1s.
	Interval time.Duration
	// Batch is the most jobs released by one look. Default 500.
	Batch int
}

// WithDefaults returns s with every unset default filled in.
func (s Sequencer) WithDefaults() Sequencer {
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Interval == 0 {
		s.Interval = time.Second
	}
	if s.Batch == 0 {
		s.Batch = 500
	}
	return s
}

func (s Sequencer) validate() error {
	switch {
	case s.JS == nil:
		return errors.New("sequencer.js: must be set")
	case s.Store == nil:
		return errors.New("sequencer.store: must be set")
	case s.Placer == nil:
		return errors.New("sequencer.placer: must be set")
	case s.Interval < 0:
		return fmt.Errorf("sequencer.interval: must not be negative, got %s", s.Interval)
	case s.Batch < 1 || s.Batch > 10000:
		return fmt.Errorf("sequencer.batch: must be 1–10000, got %d", s.Batch)
	}
	return nil
}

// Run releases waiting jobs every Interval until ctx ends.
func (s *Sequencer) Run(ctx context.Context) error {
	cfg := s.WithDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	every(ctx, cfg.Interval, func() {
		n, err := cfg.Pass(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			cfg.Logger.Warn("releasing jobs that waited for others", "released", n, "err", err)
		case n > 0:
			cfg.Logger.Debug("released jobs that waited for others", "released", n)
		}
	})
	return nil
}

// every calls pass at once, then every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, pass func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		pass()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass releases the waiting jobs whose jobs to run after have all finished
// and returns how many it placed, rejected or cancelled.
func (s *Sequencer) Pass(ctx context.Context) (int, error) {
	cfg := s.WithDefaults()
	if err := cfg.validate(); err != nil {
		return 0, err
	}
	ids, err := cfg.Store.WaitingSettled(ctx, cfg.Batch)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	var ready []*queue.Job
	cancel := map[uuid.UUID]string{}
	for _, id := range ids {
		j, err := cfg.Store.Job(ctx, id)
		if err != nil {
			return 0, err
		}
		deps, err := cfg.Store.Dependencies(ctx, j.Spec.AfterIDs())
		if err != nil {
			return 0, err
		}
		switch r, why := queue.Sequence(j.ID, j.Project, j.Spec, deps); r {
		case queue.Ready:
			j.State = queue.StatePending // as it will be when its placement is committed
			ready = append(ready, j)
		case queue.Never:
			cancel[j.ID] = why
		}
	}
	d, err := decide(ctx, cfg.Placer, ready)
	if err != nil {
		return 0, err
	}
	placed, err := cfg.Store.Release(ctx, d, cancel)
	if err != nil {
		return 0, err
	}
	if err := publishPlaced(ctx, cfg.JS, cfg.Store, nil, placed); err != nil {
		// The jobs are placed: the reconciler publishes a placed job's
		// missing run message.
		return len(ready) + len(cancel), err
	}
	return len(ready) + len(cancel), nil
}
