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
	// b's outage of 90 s has ended: one outage, under one and a half
	// 10-minute spells; a's run goes on.
	if b.DownSpells != [queue.PoolSpellBuckets]int32{0: 1} || b.UpSpells != [queue.PoolSpellBuckets]int32{} ||
		b.Spell != 10*time.Minute || a.DownSpells != [queue.PoolSpellBuckets]int32{} {
		t.Errorf("runs seen to end: sim-a-spot %v/%v, sim-b-spot %v/%v in %v; want sim-b-spot's one outage of less than a spell",
			a.UpSpells, a.DownSpells, b.UpSpells, b.DownSpells, b.Spell)
	}
	out, _, err = runCLI(t, "pools", "--database-url", url)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "OUTAGES") || !strings.Contains(out, "1, median <15m0s") {
		t.Errorf("pools printed no outage of sim-b-spot:\n%s", out)
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

func TestPoolsOutagesShowTheMedianLengthInSpells(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		down [queue.PoolSpellBuckets]int32
		want string
	}{
		{[queue.PoolSpellBuckets]int32{}, "-"},
		{[queue.PoolSpellBuckets]int32{0: 1, 2: 1, 5: 1}, "3, median ≈30m0s"},
		{[queue.PoolSpellBuckets]int32{0: 1, 11: 3}, "4, median ≥1h55m0s"},
	} {
		if got := outages(PoolRow{DownSpells: c.down, Spell: 10 * time.Minute}); got != c.want {
			t.Errorf("outages %v = %q, want %q", c.down, got, c.want)
		}
	}
}
