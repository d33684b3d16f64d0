package canary

import (
	"errors"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestExpectationsValidateNamesTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		exp   Expectations
		field string
	}{
		{"card without a name", Expectations{Card: " - "}, "card"},
		{"negative count", Expectations{Count: -1}, "count"},
		{"count on a cpu pool", Expectations{Card: "cpu", Count: 2}, "count"},
		{"driver not a version", Expectations{Driver: "latest"}, "driver"},
		{"driver on a cpu pool", Expectations{Card: "cpu", Driver: "550"}, "driver"},
		{"driver_min not a version", Expectations{DriverMin: "550."}, "driver_min"},
		{"cuda not a version", Expectations{CUDA: "12.x"}, "cuda"},
		{"cuda with a patch level", Expectations{CUDA: "12.4.1"}, "cuda"},
		{"pin below minimum", Expectations{Driver: "535", DriverMin: "550"}, "driver"},
		{"negative memory", Expectations{MinMemoryGB: -80}, "min_memory_gb"},
		{"negative free memory", Expectations{MinFreeMemoryGB: -1}, "min_free_memory_gb"},
		{"absurd temperature", Expectations{MaxTempC: 300}, "max_temp_c"},
		{"negative probe timeout", Expectations{ProbeTimeout: -time.Second}, "probe_timeout"},
		{"negative budget", Expectations{Budget: -time.Second}, "budget"},
	}
	for _, tt := range tests {
		err := tt.exp.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%s: Validate() = %v, want a FieldError on %s", tt.name, err, tt.field)
			continue
		}
		if !strings.HasPrefix(err.Error(), tt.field+": ") {
			t.Errorf("%s: error %q does not start with the field", tt.name, err)
		}
	}
	for _, ok := range []Expectations{
		{},
		{Card: "cpu"},
		poolA100,
		{Driver: "550", DriverMin: "550.54"},
		{Driver: "550.54.15", DriverMin: "535"},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", ok, err)
		}
	}
}

func TestExpectationsWithDefaults(t *testing.T) {
	t.Parallel()
	got := Expectations{Card: "H100"}.WithDefaults()
	if got.Count != 1 || got.MaxTempC != DefaultMaxTempC || got.Budget != DefaultBudget || got.ProbeTimeout != DefaultProbeTimeout || got.AllowNoGPU {
		t.Errorf("H100 defaults = %+v", got)
	}
	if cpu := (Expectations{Card: "CPU"}).WithDefaults(); !cpu.AllowNoGPU || cpu.Count != 0 {
		t.Errorf("cpu defaults = %+v, want AllowNoGPU and no count", cpu)
	}
	if kept := (Expectations{Count: 4, MaxTempC: 70}).WithDefaults(); kept.Count != 4 || kept.MaxTempC != 70 {
		t.Errorf("defaults overwrote set fields: %+v", kept)
	}
}

func TestDriverOK(t *testing.T) {
	t.Parallel()
	tests := []struct {
		driver, min, found string
		want               bool
	}{
		{"550", "", "550.54.15", true},
		{"550", "", "5500.1", false},
		{"550", "", "535.104.05", false},
		{"550.54.15", "", "550.54.15", true},
		{"550.54.15", "", "550.54.14", false},
		{"550.54", "", "550.54.15", true},
		{"", "550.54", "550.54.15", true},
		{"", "550.54", "550.90.07", true},
		{"", "550.90", "550.54.15", false},
		{"", "550", "560.28.03", true},
		{"550", "550.54", "550.40.07", false},
		{"", "", "garbled", true},
		{"550", "", "garbled", false},
	}
	for _, tt := range tests {
		if got := driverOK(Expectations{Driver: tt.driver, DriverMin: tt.min}, tt.found); got != tt.want {
			t.Errorf("driver %q min %q found %q: ok = %v, want %v", tt.driver, tt.min, tt.found, got, tt.want)
		}
	}
}

func TestCompareVersionsIsAnOrder(t *testing.T) {
	t.Parallel()
	version := rapid.SliceOfN(rapid.IntRange(0, 999), 1, 4)
	rapid.Check(t, func(t *rapid.T) {
		a, b, c := version.Draw(t, "a"), version.Draw(t, "b"), version.Draw(t, "c")
		if compareVersions(a, b) != -compareVersions(b, a) {
			t.Fatalf("compare(%v, %v) is not antisymmetric", a, b)
		}
		if compareVersions(a, b) <= 0 && compareVersions(b, c) <= 0 && compareVersions(a, c) > 0 {
			t.Fatalf("%v ≤ %v ≤ %v but %v > %v", a, b, c, a, c)
		}
		if compareVersions(append(a, 0), a) != 0 {
			t.Fatalf("a trailing .0 changed %v", a)
		}
	})
}

func TestCudaVersion(t *testing.T) {
	t.Parallel()
	for in, want := range map[int]string{12040: "12.4", 12020: "12.2", 11080: "11.8", 13000: "13.0", 12090: "12.9"} {
		if got := cudaVersion(in); got != want {
			t.Errorf("cudaVersion(%d) = %q, want %q", in, got, want)
		}
	}
}
