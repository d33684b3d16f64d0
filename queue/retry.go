package queue

import (
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go/jetstream"
)

// NewBackoff is gpuq's wait between tries of something that failed: first,
// doubling after each try up to max, with ±50 % jitter so that many callers
// failing together do not come back in step. Reset it after a success.
func NewBackoff(first, max time.Duration) *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{InitialInterval: first, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: max}
}

// RetryDelay is NewBackoff's wait before try n (1 for the first retry), for
// callers that count their tries rather than keep a backoff.
func RetryDelay(n int, first, max time.Duration) time.Duration {
	d := first
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return NewBackoff(min(d, max), max).NextBackOff()
}

// RedeliveryDelay is the delay to nak m with when handling it failed: its
// RetryDelay by how often it has been delivered.
func RedeliveryDelay(m jetstream.Msg, first, max time.Duration) time.Duration {
	n := 1
	if md, err := m.Metadata(); err == nil && md.NumDelivered > 0 {
		n = int(min(md.NumDelivered, 64))
	}
	return RetryDelay(n, first, max)
}
