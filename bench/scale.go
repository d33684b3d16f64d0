package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/queue"
)

// scaleRegions is how many regions the scale run's pools spread over; each
// region has nPools/scaleRegions pools of different cards and tiers.
const scaleRegions = 50

// scaleCards are the cards of a region's pools, cheapest first within a
// kind; "cpu" pools have no GPU.
var scaleCards = []struct {
	card  string
	price float64
}{{"cpu", 0.08}, {"T4", 0.35}, {"L4", 0.70}, {"A10G", 1.00}, {"A100", 2.90}, {"H100", 4.50}}

// scalePools returns n local pools over scaleRegions regions in four
// countries, every card in spot and on-demand tiers, prices varying by region.
func scalePools(n int) []local.PoolConfig {
	countries := []string{"DE", "FR", "FI", "US"}
	pools := make([]local.PoolConfig, 0, n)
	for i := range n {
		region := i % scaleRegions
		c := scaleCards[(i/scaleRegions)%len(scaleCards)]
		tier, price := "on-demand", c.price*(1+float64(region)/100)
		if (i/(scaleRegions*len(scaleCards)))%2 == 1 {
			tier, price = "spot", price*0.4
		}
		p := local.PoolConfig{
			Pool: fmt.Sprintf("scale-%03d", i), Region: fmt.Sprintf("scale-%02d", region), Country: countries[region%len(countries)],
			Card: c.card, VCPU: 32, MemoryGB: 128, Tier: tier, PricePerHour: fmt.Sprintf("%.4f", price), Currency: "EUR",
		}
		if c.card != "cpu" {
			p.GPUCount, p.VCPU = 1, 16
		}
		pools = append(pools, p)
	}
	return pools
}

// scaleSpecs are the jobs of the scale run: CPU and one-GPU jobs, each bound
// to one region, so that each decision chooses among that region's pools
// from every pool's offers.
func scaleSpecs() []*queue.Spec {
	var specs []*queue.Spec
	for region := range scaleRegions {
		for _, res := range []string{"{cpu: 4}", "{gpu: {count: 1, cards: [L4, A10G]}}", "{gpu: {count: 1}}"} {
			specs = append(specs, specFor(fmt.Sprintf("[\"gpuq:noop\"]\nresources: %s\nplacement: {regions: [scale-%02d]}", res, region)))
		}
	}
	return specs
}

// scaleResult is one scale run.
type scaleResult struct {
	Jobs  int `json:"jobs"`
	Pools int `json:"pools"`
	// SubmitPerSec is how fast n submissions were durably accepted while
	// the scheduler placed them.
	SubmitPerSec float64 `json:"submit_jobs_per_sec"`
	// DispatchPerSec is n over the time from the first submission to the
	// last "placed" event.
	DispatchPerSec float64 `json:"dispatch_jobs_per_sec"`
	// FirstTenthPerSec and LastTenthPerSec are the placement rates over the
	// second tenth of the jobs (the first warms up) and the last: with
	// nothing O(jobs) per decision the last tenth, placed with the rest
	// queued, is no slower.
	FirstTenthPerSec float64 `json:"first_tenth_jobs_per_sec"`
	LastTenthPerSec  float64 `json:"last_tenth_jobs_per_sec"`
	// HeapMB is the live heap this process gained (scheduler, worker
	// service and embedded NATS server) with every job queued.
	HeapMB float64 `json:"heap_mb"`
	// PoolsUsed is how many pools the jobs were placed on.
	PoolsUsed int `json:"pools_used"`
}

// measureScale submits n jobs to a control plane offering nPools pools,
// with no worker, so that every job stays queued on its pool, and measures
// submission and placement throughput, placement rate as the queue grows,
// and the heap the queued jobs cost.
func (s *stack) measureScale(ctx context.Context, n, nPools, concurrency int) (scaleResult, error) {
	res := scaleResult{Jobs: n, Pools: nPools}
	if err := s.resetStreams(ctx); err != nil {
		return res, err
	}
	dbURL, err := s.freshDB(ctx, "gpuq", true)
	if err != nil {
		return res, err
	}
	nc, js, err := s.connect()
	if err != nil {
		return res, err
	}
	defer nc.Close()
	var mu sync.Mutex
	placedAt := make([]time.Time, 0, n)
	heard := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(placedAt)
	}
	sub, err := nc.Subscribe(queue.EventSubject("*"), func(m *nats.Msg) {
		if eventState(m.Data) != queue.StatePlaced {
			return
		}
		at := time.Now()
		mu.Lock()
		placedAt = append(placedAt, at)
		mu.Unlock()
	})
	if err != nil {
		return res, err
	}
	defer sub.Unsubscribe() //nolint:errcheck // closing
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return res, err
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	p, err := s.startPlane(ctx, dbURL, scalePools(nPools), 0, 1, 30*time.Second)
	if err != nil {
		return res, err
	}
	defer p.Stop()

	start := time.Now()
	if err := submitAll(ctx, js, n, concurrency, scaleSpecs()...); err != nil {
		return res, err
	}
	res.SubmitPerSec = float64(n) / time.Since(start).Seconds()
	// Placement is heard from the jobs' "placed" events; PostgreSQL checks
	// the count at the end.
	err = poll(ctx, 10*time.Millisecond, time.Duration(n)*5*time.Millisecond+time.Minute, "every job's placed event", func() (bool, error) {
		return heard() >= n, nil
	})
	if err != nil {
		return res, err
	}
	// One subscription's handler runs for one message at a time, so the
	// times are in order.
	mu.Lock()
	at := slices.Clone(placedAt)
	mu.Unlock()
	res.DispatchPerSec = float64(n) / at[len(at)-1].Sub(start).Seconds()
	tenth := max(n/10, 2)
	if len(at) < 2*tenth {
		return res, fmt.Errorf("heard %d placed events of %d", len(at), n)
	}
	res.FirstTenthPerSec = float64(tenth-1) / at[2*tenth-1].Sub(at[tenth]).Seconds()
	res.LastTenthPerSec = float64(tenth-1) / at[len(at)-1].Sub(at[len(at)-tenth]).Seconds()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	res.HeapMB = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / (1 << 20)

	var jobs int
	if err := p.store.DB.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT pool) FROM jobs WHERE state = 'placed'`).Scan(&jobs, &res.PoolsUsed); err != nil {
		return res, err
	}
	if jobs != n {
		return res, fmt.Errorf("want %d placed jobs, got %d", n, jobs)
	}
	return res, nil
}
