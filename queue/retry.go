package queue

import (
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go/jetstream"
)

// RetryDelay is the wait before try n (1 for the first retry) of something
// that failed: first, doubling with each try up to max, with ±50 % jitter
// so that many callers failing together do not come back in step.
func RetryDelay(n int, first, max time.Duration) time.Duration {
	d := first
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	b := backoff.ExponentialBackOff{InitialInterval: min(d, max), RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: max}
	return b.NextBackOff()
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
