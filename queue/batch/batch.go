// Package batch turns concurrent calls into batched ones. A worker batches
// the claims and success records of its slots this way, and the worker
// service the claims and completions of every worker.
package batch

import "context"

// Max bounds how many calls one batch carries.
const Max = 256

// Batcher turns concurrent calls into batched ones: one batch carries every
// call that arrived while the previous batch ran. There is no timer, so a
// lone call runs at once and calls arriving together share one statement,
// one round trip and one commit. Each caller gets its own result and acts
// only on it.
type Batcher[T, R any] struct {
	do   func(ctx context.Context, batch []T) ([]R, error)
	reqs chan call[T, R]
}

type call[T, R any] struct {
	req  T
	done chan reply[R]
}

type reply[R any] struct {
	res R
	err error
}

// New returns a Batcher whose batches do runs; do returns one result per
// request, in the requests' order, or an error that fails the whole batch.
func New[T, R any](do func(context.Context, []T) ([]R, error)) *Batcher[T, R] {
	return &Batcher[T, R]{do: do, reqs: make(chan call[T, R], Max)}
}

// Call adds req to the next batch and returns its result, or the error that
// failed the whole batch.
func (b *Batcher[T, R]) Call(ctx context.Context, req T) (R, error) {
	done := make(chan reply[R], 1)
	var zero R
	select {
	case b.reqs <- call[T, R]{req: req, done: done}:
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	select {
	case r := <-done:
		return r.res, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// Queued says how many calls wait for the next batch.
func (b *Batcher[T, R]) Queued() int { return len(b.reqs) }

// Run runs batches until ctx ends; its owner ends ctx only after every
// caller has returned.
func (b *Batcher[T, R]) Run(ctx context.Context) {
	for {
		var calls []call[T, R]
		select {
		case c := <-b.reqs:
			calls = append(calls, c)
		case <-ctx.Done():
			return
		}
	drain:
		for len(calls) < Max {
			select {
			case c := <-b.reqs:
				calls = append(calls, c)
			default:
				break drain
			}
		}
		reqs := make([]T, len(calls))
		for i, c := range calls {
			reqs[i] = c.req
		}
		res, err := b.do(ctx, reqs)
		for i, c := range calls {
			if err != nil {
				c.done <- reply[R]{err: err}
				continue
			}
			c.done <- reply[R]{res: res[i]}
		}
	}
}
