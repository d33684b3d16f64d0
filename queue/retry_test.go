package queue_test

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
)

func TestRetryDelayDoublesUpToItsCapWithJitter(t *testing.T) {
	first, max := 100*time.Millisecond, 2*time.Second
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 5: 1600 * time.Millisecond, 6: max, 60: max} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := queue.RetryDelay(n, first, max)
			if d < want/2 || d > want*3/2+1 {
				t.Fatalf("try %d: %s is outside %s ± 50%%", n, d, want)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Fatalf("try %d: the delays must be jittered, saw only %d values", n, len(seen))
		}
	}
}
