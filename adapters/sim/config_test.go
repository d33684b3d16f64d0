package sim_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/adapters/sim"
)

func TestPoolsFromTracesGivesASpotAndAnOnDemandPoolPerTraceAndSkipsUnknownZones(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeTrace(t, dir, "us-east-1c_v100_1.json", "1, 0", 32)
	writeTrace(t, dir, "mars-north-1a_v100_1.json", "1", 32)
	writeTrace(t, dir, "us-west-2b_t4_1.json", "1", 32)
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	pools, skipped, err := sim.PoolsFromTraces(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) != 2 || strings.Join(skipped, ",") != "mars-north-1a_v100_1.json,us-west-2b_t4_1.json" {
		t.Fatalf("pools %+v, skipped %v", pools, skipped)
	}
	od, spot := pools[0], pools[1]
	if od.Pool != "sim-us-east-1c-v100-1" || od.Tier != "on-demand" || od.PricePerHour != "3.06" || od.Trace != "" || od.Country != "US" || od.Card != "V100" {
		t.Errorf("on-demand pool = %+v", od)
	}
	if spot.Pool != "sim-us-east-1c-v100-1-spot" || spot.Tier != "spot" || spot.PricePerHour != "0.92" || spot.Trace != "us-east-1c_v100_1.json" {
		t.Errorf("spot pool = %+v", spot)
	}
	if _, _, err := sim.PoolsFromTraces(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no trace named ZONE_CARD_COUNT.json") {
		t.Errorf("empty dir: %v", err)
	}
}

func TestNewRefusesBadConfigNamingTheField(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeTrace(t, dir, "z_v100_1.json", "1", 60)
	good := sim.PoolConfig{Pool: "p", Region: "r", Country: "US", Card: "V100", Tier: "spot", PricePerHour: "1", Trace: "z_v100_1.json"}
	tests := []struct {
		name   string
		change func(*sim.Config)
		want   string
	}{
		{"no pools", func(c *sim.Config) { c.Pools = nil }, "pools: name at least one pool"},
		{"bad speed", func(c *sim.Config) { c.Speed = -1 }, "speed:"},
		{"trace outside the directory", func(c *sim.Config) { c.Pools[0].Trace = "../etc/passwd" }, "pools[0].trace: \"../etc/passwd\" must be a path inside"},
		{"missing trace", func(c *sim.Config) { c.Pools[0].Trace = "none.json" }, "pools[0].trace:"},
		{"trace on on-demand", func(c *sim.Config) { c.Pools[0].Tier = "on-demand" }, "pools[0].trace: only a spot pool follows a trace"},
		{"notice", func(c *sim.Config) { c.Pools[0].Notice = "aws" }, "pools[0].notice: the simulated cloud warns with sigterm or none"},
		{"country", func(c *sim.Config) { c.Pools[0].Country = "usa" }, "pools[0].country:"},
		{"price", func(c *sim.Config) { c.Pools[0].PricePerHour = "1,5" }, "pools[0].price_per_hour"},
		{"duplicate", func(c *sim.Config) { c.Pools = append(c.Pools, c.Pools[0]) }, "pools[1].pool: \"p\" is already the name of pools[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := sim.Config{TracesDir: dir, Pools: []sim.PoolConfig{good}}
			tt.change(&cfg)
			_, err := sim.New(cfg, sleeper(t), nil, nil)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("New = %v, want prefix %q", err, tt.want)
			}
		})
	}
}
