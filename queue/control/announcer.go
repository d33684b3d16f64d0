package control

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/gpuq/gpuq/queue"
)

// InstanceEventStore is what the announcer reads and marks: the instance
// events committed and not yet announced.
type InstanceEventStore interface {
	UnannouncedInstanceEvents(ctx context.Context, limit int) ([]queue.InstanceEvent, error)
	SetInstanceEventsAnnounced(ctx context.Context, ids []int64) error
}

// InstanceAnnouncer publishes every committed instance event on JetStream
// (queue.InstanceSubject), in the order of the events' ids, and marks it
// announced. It works from the table, not from the code that changed an
// instance: a change that rolled back has no row to announce, and a publish
// that failed (or a server that died before it) is repeated by the next
// pass, which JetStream drops when the first one was stored after all. The
// server that scales and reaps runs it.
type InstanceAnnouncer struct {
	Store InstanceEventStore
	JS    queue.Publisher
	// Interval between passes when nothing says events were recorded.
	// Default 2s.
	Interval time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger

	once   sync.Once
	kicked chan struct{}
}

// announceBatch is how many events one read of the table takes.
const announceBatch = 500

func (a *InstanceAnnouncer) kicks() chan struct{} {
	a.once.Do(func() { a.kicked = make(chan struct{}, 1) })
	return a.kicked
}

// InstanceEventsRecorded asks for a pass now; the store calls it after a
// change of an instance commits.
func (a *InstanceAnnouncer) InstanceEventsRecorded() {
	select {
	case a.kicks() <- struct{}{}:
	default:
	}
}

// Run announces until ctx ends: at once when told events were recorded,
// and every Interval for those a failed pass or another server left.
func (a *InstanceAnnouncer) Run(ctx context.Context) error {
	if a.Store == nil || a.JS == nil {
		return errors.New("instance announcer: Store and JS must be set")
	}
	interval := a.Interval
	if interval == 0 {
		interval = 2 * time.Second
	}
	logger := a.Logger
	if logger == nil {
		logger = slog.Default()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		_, err := a.Pass(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			logger.Warn("announcing instance events; the next pass repeats them", "err", err)
			failing = true
		case err == nil && failing:
			logger.Info("instance events announced again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-a.kicks():
		case <-t.C:
		}
	}
}

// Pass announces the events not yet announced, oldest first, and returns
// how many it announced. It stops at the first publish that fails, so that
// no event of an instance is announced before an earlier one.
func (a *InstanceAnnouncer) Pass(ctx context.Context) (int, error) {
	total := 0
	for {
		evs, err := a.Store.UnannouncedInstanceEvents(ctx, announceBatch)
		if err != nil {
			return total, err
		}
		var done []int64
		var pubErr error
		for _, ev := range evs {
			if pubErr = queue.AnnounceInstanceEvent(ctx, a.JS, ev); pubErr != nil {
				break
			}
			done = append(done, ev.ID)
		}
		if len(done) > 0 {
			// Marked with a context of its own: an event JetStream stored
			// is marked even when ctx ends now, so that it is not
			// announced again after the duplicate window.
			mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			err := a.Store.SetInstanceEventsAnnounced(mctx, done)
			cancel()
			if err != nil {
				return total, err
			}
		}
		total += len(done)
		if pubErr != nil || len(evs) < announceBatch {
			return total, pubErr
		}
	}
}
