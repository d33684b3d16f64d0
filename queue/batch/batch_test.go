package batch

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
)

func TestBatcherGivesEachCallItsOwnResultAndBatchesWhatArrivesMeanwhile(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	b := New(func(_ context.Context, batch []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(batch))
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			close(entered)
			<-release
		}
		out := make([]int, len(batch))
		for i, v := range batch {
			out[i] = v * 10
		}
		return out, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.Run(ctx)
	const n = 20
	errs := make(chan error, n+1)
	call := func(v int) {
		got, err := b.Call(ctx, v)
		if err == nil && got != v*10 {
			err = fmt.Errorf("call %d got %d, another call's result", v, got)
		}
		errs <- err
	}
	go call(0)
	<-entered
	// While the first batch runs, n more calls queue up.
	for i := 1; i <= n; i++ {
		go call(i)
	}
	for b.Queued() < n {
		runtime.Gosched()
	}
	close(release)
	for range n + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 2 || sizes[0] != 1 || sizes[1] != n {
		t.Fatalf("want a batch of 1 and then one batch of the %d calls that queued behind it, got %v", n, sizes)
	}
}

func TestBatcherReturnsABatchErrorToEveryCall(t *testing.T) {
	t.Parallel()
	boom := errors.New("database gone")
	b := New(func(context.Context, []string) ([]bool, error) { return nil, boom })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.Run(ctx)
	if _, err := b.Call(ctx, "x"); !errors.Is(err, boom) {
		t.Fatalf("want the batch error, got %v", err)
	}
}
