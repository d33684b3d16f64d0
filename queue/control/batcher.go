package control

import "context"

// maxBatch bounds how many calls one batch carries.
const maxBatch = 256

// batcher turns concurrent calls into batched ones: one batch carries every
// call that arrived while the previous batch ran. There is no timer, so a
// lone call runs at once and calls arriving together share one statement,
// one round trip and one commit. The worker service batches the completions
// of all workers this way; each caller gets its own result.
type batcher[T, R any] struct {
	do   func(ctx context.Context, batch []T) ([]R, error)
	reqs chan batchCall[T, R]
}

type batchCall[T, R any] struct {
	req  T
	done chan batchReply[R]
}

type batchReply[R any] struct {
	res R
	err error
}

func newBatcher[T, R any](do func(context.Context, []T) ([]R, error)) *batcher[T, R] {
	return &batcher[T, R]{do: do, reqs: make(chan batchCall[T, R], maxBatch)}
}

// call adds req to the next batch and returns its result, or the error that
// failed the whole batch.
func (b *batcher[T, R]) call(ctx context.Context, req T) (R, error) {
	done := make(chan batchReply[R], 1)
	var zero R
	select {
	case b.reqs <- batchCall[T, R]{req: req, done: done}:
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

// run runs batches until ctx ends; the worker ends it only after every
// attempt has returned.
func (b *batcher[T, R]) run(ctx context.Context) {
	for {
		var calls []batchCall[T, R]
		select {
		case c := <-b.reqs:
			calls = append(calls, c)
		case <-ctx.Done():
			return
		}
	drain:
		for len(calls) < maxBatch {
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
				c.done <- batchReply[R]{err: err}
				continue
			}
			c.done <- batchReply[R]{res: res[i]}
		}
	}
}
