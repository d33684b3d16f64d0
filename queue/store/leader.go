package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/gpuq/gpuq/sql/db"
)

// Lead runs fn while this process holds role's leadership: a PostgreSQL
// session advisory lock taken on a connection of its own, so that the lock
// ends with the session when the process dies, however it dies. It returns
// false at once when another session holds the lock. While fn runs, the
// connection is checked every check; when the check fails (the session is
// gone and another server may take the lead) fn's context is cancelled, and
// Lead returns once fn has returned.
func (s *Store) Lead(ctx context.Context, role string, check time.Duration, fn func(ctx context.Context)) (bool, error) {
	if role == "" {
		return false, errors.New("leading: role must be set")
	}
	if check <= 0 {
		return false, fmt.Errorf("leading %s: check must be positive, got %s", role, check)
	}
	conn, err := s.DB.Conn(ctx)
	if err != nil {
		return false, fmt.Errorf("leading %s: %w", role, err)
	}
	// The lock lives with this connection; it is never handed back to the
	// pool holding it.
	defer conn.Close()
	q := db.New(pgxArgs{conn})
	locked, err := q.LeaderTryLock(ctx, role)
	if err != nil {
		return false, fmt.Errorf("leading %s: taking the lock: %w", role, err)
	}
	if !locked {
		return false, nil
	}
	held, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(held)
	}()
	t := time.NewTicker(check)
	defer t.Stop()
	var lostErr error
watch:
	for {
		select {
		case <-done:
			break watch
		case <-t.C:
			// Not held's context: lib/pq gives up a connection whose query
			// is cancelled, and with it the lock before it is released.
			pctx, cancel := context.WithTimeout(context.WithoutCancel(held), check)
			err := conn.PingContext(pctx)
			cancel()
			if err != nil {
				lostErr = fmt.Errorf("leading %s: lost the session holding the lock: %w", role, err)
				lost(lostErr)
				<-done
				break watch
			}
		}
	}
	if lostErr != nil {
		// Answering ErrBadConn makes database/sql throw the session away; PostgreSQL releases the
		// lock with it, if it has not already.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		return true, lostErr
	}
	if _, err := q.LeaderUnlock(context.WithoutCancel(ctx), role); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		return true, fmt.Errorf("leading %s: releasing the lock: %w", role, err)
	}
	return true, nil
}
