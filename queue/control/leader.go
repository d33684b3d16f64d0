package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// LeaderStore elects one holder of a role per deployment: Lead runs fn while
// this process holds the role and cancels fn's context when it stops
// holding it; it answers false at once when another process holds it.
type LeaderStore interface {
	Lead(ctx context.Context, role string, check time.Duration, fn func(ctx context.Context)) (bool, error)
}

// Leader runs loops that must run once per deployment (the autoscaler and
// the reaper: two servers scaling the same pools would both launch) on
// whichever server holds the role, and on another one as soon as the holder
// dies or loses its database session.
type Leader struct {
	Store LeaderStore
	// Role names the leadership, such as "capacity".
	Role string
	// Retry is how often a server that does not lead tries to take the
	// lead. Default 2s.
	Retry time.Duration
	// Check is how often the leader checks that its session still holds
	// the lock. Default 1s.
	Check time.Duration
	// Loops run while this server leads; each gets a context that ends
	// when the lead is lost.
	Loops []func(ctx context.Context) error
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Run tries to take the lead every Retry and runs the loops while it holds
// it, until ctx ends.
func (l *Leader) Run(ctx context.Context) error {
	retry, check, logger := l.Retry, l.Check, l.Logger
	if retry == 0 {
		retry = 2 * time.Second
	}
	if check == 0 {
		check = time.Second
	}
	if logger == nil {
		logger = slog.Default()
	}
	switch {
	case l.Store == nil:
		return errors.New("leader.store: must be set")
	case l.Role == "":
		return errors.New("leader.role: must be set")
	case retry < 10*time.Millisecond:
		return fmt.Errorf("leader.retry: must be at least 10ms, got %s", retry)
	case check < 10*time.Millisecond:
		return fmt.Errorf("leader.check: must be at least 10ms, got %s", check)
	}
	waiting := false
	for {
		led, err := l.Store.Lead(ctx, l.Role, check, func(ctx context.Context) {
			logger.Info("leading", "role", l.Role)
			l.runLoops(ctx, logger)
		})
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			logger.Warn("leadership", "role", l.Role, "err", err)
		case led:
			logger.Info("no longer leading", "role", l.Role)
		case !waiting:
			logger.Info("another server leads; standing by", "role", l.Role)
		}
		waiting = !led && err == nil
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
	}
}

// runLoops runs every loop until ctx ends and all have returned.
func (l *Leader) runLoops(ctx context.Context, logger *slog.Logger) {
	done := make(chan error, len(l.Loops))
	for _, loop := range l.Loops {
		go func() { done <- loop(ctx) }()
	}
	for range l.Loops {
		if err := <-done; err != nil {
			logger.Error("a leader's loop stopped", "role", l.Role, "err", err)
		}
	}
}
