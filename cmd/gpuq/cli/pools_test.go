package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/sql/pgtest"
)

func TestPoolsShowsEachPoolsRecordedAvailabilityPreemptionsAndPrice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	s, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now().Add(-time.Hour).Truncate(time.Hour)
	for i := range 12 { // a up for 2 minutes of 10 s ticks; b down 9, then up 3
		at := start.Add(time.Duration(i) * 10 * time.Second)
		obs := []queue.PoolObservation{
			{Pool: "sim-a-spot", Up: true, PriceMicros: 300_000, Currency: "EUR"},
			{Pool: "sim-b-spot", Up: i >= 9, PriceMicros: 280_000, Currency: "EUR"},
		}
		if err := s.ObservePools(ctx, at, obs); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []queue.PoolEvent{{Pool: "sim-b-spot", Kind: queue.PoolPreempted}, {Pool: "sim-b-spot", Kind: queue.PoolNoCapacity}} {
		e.At = start.Add(30 * time.Second)
		if err := s.RecordPoolEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
	}

	out, errOut, err := runCLI(t, "pools", "--database-url", url, "-o", "json")
	if err != nil {
		t.Fatalf("pools: %v\n%s", err, errOut)
	}
	var rows []PoolRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2:\n%s", len(rows), out)
	}
	a, b := rows[0], rows[1]
	if a.Pool != "sim-a-spot" || a.Availability != 1 || !a.Up || a.For != 2*time.Minute || a.Price.String() != "0.30 EUR" {
		t.Errorf("sim-a-spot = %+v, want always up, up for 2m, at 0.30 EUR", a)
	}
	if b.Availability != 0.25 || !b.Up || b.For != 30*time.Second || b.Preemptions != 1 || b.NoCapacity != 1 ||
		b.PreemptionsPerHour != 12 || b.Price.String() != "0.28 EUR" {
		t.Errorf("sim-b-spot = %+v, want 25%% up, up for 30s, 1 preemption (12 an hour over its 5-minute bucket), 1 refused launch, 0.28 EUR", b)
	}

	out, _, err = runCLI(t, "pools", "--database-url", url, "--history", "--pool", "sim-b-spot")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "WIDTH") || !strings.Contains(out, "sim-b-spot") || strings.Contains(out, "sim-a-spot") || !strings.Contains(out, "25%") {
		t.Errorf("pools --history --pool sim-b-spot printed:\n%s", out)
	}

	if _, _, err := runCLI(t, "pools", "--database-url", url, "--since", "-1h"); err == nil || !strings.Contains(err.Error(), "--since") {
		t.Errorf("a negative --since: err %v, want one naming --since", err)
	}
}
