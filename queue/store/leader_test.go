package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/sql/pgtest"
)

func openStore(t *testing.T, url string) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// lead runs Lead in the background; its fn reports its start on started and
// its context's cause on ended.
func lead(ctx context.Context, s *store.Store, role string) (started chan struct{}, ended chan error, result chan error) {
	started, ended, result = make(chan struct{}), make(chan error, 1), make(chan error, 1)
	go func() {
		led, err := s.Lead(ctx, role, 20*time.Millisecond, func(ctx context.Context) {
			close(started)
			<-ctx.Done()
			ended <- context.Cause(ctx)
		})
		if err == nil && !led {
			err = errNotLed
		}
		result <- err
	}()
	return started, ended, result
}

var errNotLed = errors.New("did not lead")

func TestLeadIsHeldByOneSessionAndPassesOnWhenItsHolderLetsGo(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := openStore(t, url), openStore(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	started, _, result := lead(ctx, a, "capacity")
	<-started
	ran := false
	led, err := b.Lead(context.Background(), "capacity", time.Second, func(context.Context) { ran = true })
	if err != nil || led || ran {
		t.Fatalf("a second session led a held role: led=%v ran=%v err=%v", led, ran, err)
	}
	// Another role is not held.
	led, err = b.Lead(context.Background(), "other", time.Second, func(context.Context) {})
	if err != nil || !led {
		t.Fatalf("another role: led=%v err=%v", led, err)
	}

	cancel()
	if err := <-result; err != nil {
		t.Fatal(err)
	}
	led, err = b.Lead(context.Background(), "capacity", time.Second, func(context.Context) {})
	if err != nil || !led {
		t.Fatalf("after the holder let go: led=%v err=%v", led, err)
	}
}

func TestLeadEndsWhenItsSessionDiesAndAnotherTakesOver(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := openStore(t, url), openStore(t, url)
	ctx := context.Background()

	started, ended, result := lead(ctx, a, "capacity")
	<-started
	// The holder's session dies the way a SIGKILLed server's does: the
	// server ends it, and nothing of the holder's says goodbye. The call
	// waits (up to 10 s) for the backend to have exited, so its locks are
	// released when it returns: the holder may hear its connection close
	// before the backend has let go of the lock.
	res, err := b.DB.ExecContext(ctx, `SELECT pg_terminate_backend(pid, 10000) FROM pg_locks
		WHERE locktype = 'advisory' AND classid = 1735423345 AND granted AND pid <> pg_backend_pid()
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("found %d sessions holding the lock, want 1", n)
	}
	select {
	case cause := <-ended:
		if cause == nil || errors.Is(cause, context.Canceled) && cause.Error() == context.Canceled.Error() {
			t.Fatalf("the leader's context ended with %v, want the lost session", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the leader kept leading after its session died")
	}
	if err := <-result; err == nil || errors.Is(err, errNotLed) {
		t.Fatalf("Lead returned %v, want the lost session", err)
	}
	led, err := b.Lead(ctx, "capacity", time.Second, func(context.Context) {})
	if err != nil || !led {
		t.Fatalf("after the leader's session died: led=%v err=%v", led, err)
	}
	// The old leader's store still works and can lead again.
	led, err = a.Lead(ctx, "capacity", time.Second, func(context.Context) {})
	if err != nil || !led {
		t.Fatalf("the old leader, later: led=%v err=%v", led, err)
	}
}
