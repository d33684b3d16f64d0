package adapters

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// RetryConfig bounds how an adapter retries a provider call.
type RetryConfig struct {
	// Attempts is the most calls made, the first included. Default 4.
	Attempts int
	// Backoff is the wait before the second call when the provider gives
	// no Retry-After; it doubles after each call, with ±50 % jitter, up
	// to MaxWait. Default 1s.
	Backoff time.Duration
	// MaxWait caps any one wait, the provider's Retry-After included: a
	// longer wait returns the error instead. Default 1m.
	MaxWait time.Duration
	// AttemptTimeout bounds one call when ctx has no earlier deadline; a
	// call cut off by it counts as an unknown outcome. Default 1m.
	AttemptTimeout time.Duration
}

// WithDefaults fills the zero fields with their defaults.
func (c RetryConfig) WithDefaults() RetryConfig {
	if c.Attempts == 0 {
		c.Attempts = 4
	}
	if c.Backoff == 0 {
		c.Backoff = time.Second
	}
	if c.MaxWait == 0 {
		c.MaxWait = time.Minute
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = time.Minute
	}
	return c
}

// Validate checks the config, naming the field at fault.
func (c RetryConfig) Validate() error {
	switch {
	case c.Attempts < 1 || c.Attempts > 20:
		return fmt.Errorf("attempts: must be 1–20, got %d", c.Attempts)
	case c.Backoff < 0:
		return fmt.Errorf("backoff: must not be negative, got %s", c.Backoff)
	case c.MaxWait < 0:
		return fmt.Errorf("max_wait: must not be negative, got %s", c.MaxWait)
	case c.AttemptTimeout <= 0:
		return fmt.Errorf("attempt_timeout: must be positive, got %s", c.AttemptTimeout)
	}
	return nil
}

// Retry calls fn until it succeeds, fails with an error that retrying does
// not cure, or the attempts run out. Transient errors are retried after the
// provider's Retry-After (rate limits are honoured, never hammered), else
// after the backoff. Use it for calls that are safe to repeat: reads and
// terminations, never a launch (see LaunchIdempotent).
func Retry(ctx context.Context, c RetryConfig, fn func(ctx context.Context) error) error {
	c = c.WithDefaults()
	retry := c.backOff()
	var err error
	for attempt := 1; ; attempt++ {
		err = callWithTimeout(ctx, c.AttemptTimeout, fn)
		if err == nil {
			return nil
		}
		wait, transient := RetryAfter(err)
		if !transient || attempt >= c.Attempts {
			return err
		}
		if wait == 0 {
			wait = min(retry.NextBackOff(), c.MaxWait)
		}
		if serr := sleep(ctx, c.MaxWait, wait); serr != nil {
			return errors.Join(err, serr)
		}
	}
}

// LaunchIdempotent rents at most one machine for req however often the
// provider fails. create asks the provider for the machine once; find looks
// for a machine carrying req.ClientToken. After an unknown outcome (a
// provider failure, a timeout) find runs before any retry, and a machine it
// finds is the launch's result: a dropped response never rents two machines.
// A rate-limited create is retried after its Retry-After without a lookup,
// since the provider refused it.
func LaunchIdempotent(ctx context.Context, c RetryConfig, req LaunchRequest,
	create func(ctx context.Context) (Instance, error),
	find func(ctx context.Context, clientToken string) (Instance, bool, error),
) (Instance, error) {
	if err := req.Validate(); err != nil {
		return Instance{}, &ProviderError{Op: "launch", Pool: req.Pool, Kind: ErrInvalidRequest, Err: err}
	}
	c = c.WithDefaults()
	retry := c.backOff()
	for attempt := 1; ; attempt++ {
		var inst Instance
		err := callWithTimeout(ctx, c.AttemptTimeout, func(ctx context.Context) error {
			var err error
			inst, err = create(ctx)
			return err
		})
		if err == nil {
			return inst, nil
		}
		if ctx.Err() != nil {
			return Instance{}, err
		}
		unknown := errors.Is(err, ErrProviderDown) || errors.Is(err, context.DeadlineExceeded)
		if !unknown && !errors.Is(err, ErrTransient) {
			return Instance{}, err
		}
		if unknown {
			var found Instance
			var ok bool
			ferr := Retry(ctx, c, func(ctx context.Context) error {
				var err error
				found, ok, err = find(ctx, req.ClientToken)
				return err
			})
			if ferr != nil {
				// Without knowing whether the machine exists, a retry
				// could rent a second one: give up and let the reaper or
				// the next reconciliation find it by its token.
				return Instance{}, fmt.Errorf("launch outcome unknown (%w) and looking for token %s failed: %w", err, req.ClientToken, ferr)
			}
			if ok {
				return found, nil
			}
		}
		if attempt >= c.Attempts {
			return Instance{}, err
		}
		wait, _ := RetryAfter(err)
		if wait == 0 {
			wait = min(retry.NextBackOff(), c.MaxWait)
		}
		if serr := sleep(ctx, c.MaxWait, wait); serr != nil {
			return Instance{}, errors.Join(err, serr)
		}
	}
}

// backOff is the wait between tries the provider set no Retry-After for:
// Backoff, doubling, with ±50 % jitter, at most MaxWait.
func (c RetryConfig) backOff() *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{InitialInterval: c.Backoff, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: c.MaxWait}
}

func callWithTimeout(ctx context.Context, timeout time.Duration, fn func(context.Context) error) error {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= timeout {
		return fn(ctx)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return fn(cctx)
}

// sleep waits d, or returns an error when d exceeds max or ctx ends first.
func sleep(ctx context.Context, max, d time.Duration) error {
	if d > max {
		return fmt.Errorf("provider asks to wait %s, more than the %s allowed", d, max)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
