package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control/httpapi"
)

// benchClients is how many clients submit at once.
const benchClients = 8

// BenchmarkHTTPSubmit measures submissions through the API by 8 concurrent
// clients, each answered once the scheduler has recorded and placed the
// job; the jobs are the built-in no-op, run by the env's worker.
func BenchmarkHTTPSubmit(b *testing.B) {
	e := startEnv(b, func(c *httpapi.Config) { c.RatePerSecond, c.Burst = 1e6, 1e6 })
	tok := e.token(queue.RoleSubmit, nil, "bench")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchClients}}
	spec := []byte(`{"command": "` + queue.NoopCommand + `"}`)
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	for range benchClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				req, _ := http.NewRequest("POST", e.URL+"/v1/jobs", bytes.NewReader(spec))
				req.Header.Set("Authorization", "Bearer "+tok)
				req.Header.Set("Content-Type", "application/json")
				res, err := client.Do(req)
				if err == nil {
					io.Copy(io.Discard, res.Body) //nolint:errcheck // drained
					res.Body.Close()
					if res.StatusCode != http.StatusCreated {
						err = fmt.Errorf("status %d", res.StatusCode)
					}
				}
				if err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkSSEEventLatency measures how long a job's state change takes to
// reach a client following its project's events: from the moment the
// event is recorded (its "at") to the moment the client reads it.
func BenchmarkSSEEventLatency(b *testing.B) {
	e := startEnv(b, func(c *httpapi.Config) { c.RatePerSecond, c.Burst = 1e6, 1e6 })
	tok := e.token(queue.RoleSubmit, nil, "bench")
	var mu sync.Mutex
	var lat []time.Duration
	want := 4 * b.N // pending, placed, running, succeeded per job
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.events("/v1/projects/bench/events", tok, nil, 10*time.Minute, func(ev sseEvent) bool {
			now := time.Now()
			var pe httpapi.ProjectEvent
			if json.Unmarshal([]byte(ev.Data), &pe) != nil {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, now.Sub(pe.At))
			return len(lat) >= want
		})
	}()
	time.Sleep(300 * time.Millisecond) // the stream sends only new events
	b.ResetTimer()
	for range b.N {
		e.submit(tok, `{"command": "`+queue.NoopCommand+`"}`)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("only %d of %d events arrived", len(lat), want)
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
