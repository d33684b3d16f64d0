package canary

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
)

// healthyA100 is a DGX A100 (8 × A100-SXM4-80GB, driver 550.54.15, CUDA
// 12.4) whose every device answers the canary's questions with good news.
func healthyA100(t testing.TB) *dgxa100.Server {
	t.Helper()
	s := dgxa100.NewWithGPUs(gpus.Multiple(8, gpus.A100_SXM4_80GB)...)
	for _, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		dev.MemoryInfo.Free = dev.MemoryInfo.Total - 512<<20
		dev.MemoryInfo.Used = 512 << 20
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 34, nvml.SUCCESS }
		dev.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 0, nvml.SUCCESS }
		dev.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS }
		dev.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
	}
	return s
}

func device(s *dgxa100.Server, i int) *dgxa100.Device { return s.Devices[i].(*dgxa100.Device) }

// poolA100 is what a pool of DGX A100 80GB nodes expects.
var poolA100 = Expectations{
	Card:            "A100-80GB",
	Count:           8,
	Driver:          "550",
	CUDA:            "12.4",
	MinMemoryGB:     80,
	MinFreeMemoryGB: 70,
	MaxTempC:        80,
}

func failedLabels(r Report) []string {
	var out []string
	for _, f := range r.Failures() {
		out = append(out, f.Label())
	}
	return out
}

func TestRunReportsEachDriftAsItsOwnFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		drift  func(*dgxa100.Server)
		expect func(*Expectations)
		want   []string
		found  string
	}{
		{name: "healthy node passes", want: nil},
		{
			name:  "wrong driver branch",
			drift: func(s *dgxa100.Server) { s.DriverVersion = "535.104.05" },
			want:  []string{"driver"}, found: "535.104.05",
		},
		{
			name:   "driver pinned exactly to another build",
			expect: func(e *Expectations) { e.Driver = "550.54.14" },
			want:   []string{"driver"}, found: "550.54.15",
		},
		{
			name:   "driver below the minimum",
			expect: func(e *Expectations) { e.Driver, e.DriverMin = "", "550.90" },
			want:   []string{"driver"}, found: "550.54.15",
		},
		{
			name:  "old CUDA",
			drift: func(s *dgxa100.Server) { s.CudaDriverVersion = 12020 },
			want:  []string{"cuda"}, found: "12.2",
		},
		{
			name:  "too few devices",
			drift: func(s *dgxa100.Server) { s.Devices = s.Devices[:7] },
			want:  []string{"device_count"}, found: "7",
		},
		{
			name: "wrong card: a 40GB A100 in an 80GB pool",
			drift: func(s *dgxa100.Server) {
				device(s, 3).Config = gpus.A100_SXM4_40GB
				device(s, 3).MemoryInfo = nvml.Memory{Total: 40960 << 20, Free: 40000 << 20}
			},
			want:  []string{"card[3]", "memory_total[3]", "memory_free[3]"},
			found: "A100-SXM4-40GB",
		},
		{
			name: "uncorrected ECC errors",
			drift: func(s *dgxa100.Server) {
				device(s, 5).GetTotalEccErrorsFunc = func(typ nvml.MemoryErrorType, counter nvml.EccCounterType) (uint64, nvml.Return) {
					if typ == nvml.MEMORY_ERROR_TYPE_UNCORRECTED && counter == nvml.VOLATILE_ECC {
						return 2, nvml.SUCCESS
					}
					return 0, nvml.SUCCESS
				}
			},
			want: []string{"ecc_uncorrected[5]"}, found: "2",
		},
		{
			name: "retired pages pending",
			drift: func(s *dgxa100.Server) {
				device(s, 1).GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
			},
			want: []string{"retired_pages[1]"}, found: "retirement pending",
		},
		{
			name: "remapped rows pending",
			drift: func(s *dgxa100.Server) {
				device(s, 2).GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 1, true, false, nvml.SUCCESS }
			},
			want: []string{"remapped_rows[2]"}, found: "remapping pending",
		},
		{
			name: "row remapping failed",
			drift: func(s *dgxa100.Server) {
				device(s, 2).GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 512, false, true, nvml.SUCCESS }
			},
			want: []string{"remapped_rows[2]"}, found: "remapping failed",
		},
		{
			name: "too little free memory",
			drift: func(s *dgxa100.Server) {
				device(s, 0).MemoryInfo.Free = 10 * gb
			},
			want: []string{"memory_free[0]"}, found: "10.0 GB",
		},
		{
			name:   "too little total memory for the pool",
			expect: func(e *Expectations) { e.MinMemoryGB = 90 },
			want:   []string{"memory_total[0]", "memory_total[1]", "memory_total[2]", "memory_total[3]", "memory_total[4]", "memory_total[5]", "memory_total[6]", "memory_total[7]"},
			found:  "85.9 GB",
		},
		{
			name: "hot GPU",
			drift: func(s *dgxa100.Server) {
				device(s, 7).GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 91, nvml.SUCCESS }
			},
			want: []string{"temperature[7]"}, found: "91 °C",
		},
		{
			name: "a device NVML cannot read",
			drift: func(s *dgxa100.Server) {
				device(s, 4).GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
			},
			want: []string{"temperature[4]"}, found: "error: ",
		},
		{
			name: "features a card lacks are skipped, not failed",
			drift: func(s *dgxa100.Server) {
				for _, d := range s.Devices {
					dev := d.(*dgxa100.Device)
					dev.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
					dev.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
						return 0, nvml.ERROR_NOT_SUPPORTED
					}
				}
			},
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := healthyA100(t)
			if tt.drift != nil {
				tt.drift(s)
			}
			exp := poolA100
			if tt.expect != nil {
				tt.expect(&exp)
			}
			r := Run(context.Background(), s, exp)
			if got := failedLabels(r); !slices.Equal(got, tt.want) {
				t.Fatalf("failed checks = %v, want %v\n%s", got, tt.want, r.Summary())
			}
			if r.OK != (len(tt.want) == 0) {
				t.Errorf("OK = %v with failures %v", r.OK, tt.want)
			}
			if tt.found != "" && !strings.Contains(r.Failures()[0].Found, tt.found) {
				t.Errorf("found = %q, want it to mention %q", r.Failures()[0].Found, tt.found)
			}
		})
	}
}

func TestRunCoversEveryCheckOnEveryDevice(t *testing.T) {
	t.Parallel()
	r := Run(context.Background(), healthyA100(t), poolA100)
	count := map[string]int{}
	for _, c := range r.Checks {
		count[c.Name]++
		if c.Expected == "" || c.Found == "" {
			t.Errorf("%s: expected %q, found %q; both must be filled", c.Label(), c.Expected, c.Found)
		}
	}
	for _, name := range []string{CheckNVML, CheckDriver, CheckCUDA, CheckDeviceCount} {
		if count[name] != 1 {
			t.Errorf("%s ran %d times, want once", name, count[name])
		}
	}
	for _, name := range []string{CheckCard, CheckMemoryTotal, CheckMemoryFree, CheckECC, CheckRetiredPages, CheckRemappedRows, CheckTemperature} {
		if count[name] != 8 {
			t.Errorf("%s ran %d times, want once per device (8)", name, count[name])
		}
	}
	if r.Driver != "550.54.15" || r.CUDA != "12.4" || len(r.Devices) != 8 || r.Devices[7].Name != "NVIDIA A100-SXM4-80GB" {
		t.Errorf("report facts = driver %q, cuda %q, devices %v", r.Driver, r.CUDA, r.Devices)
	}
}

func TestRunWithoutNVMLFailsLoudly(t *testing.T) {
	t.Parallel()
	for _, ret := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED} {
		lib := &mock.Interface{InitFunc: func() nvml.Return { return ret }}
		r := Run(context.Background(), lib, poolA100)
		if r.OK || len(r.Checks) != 1 || r.Checks[0].Name != CheckNVML || r.Checks[0].Status != Fail {
			t.Fatalf("%v: report = %+v, want one failed nvml check", ret, r)
		}
		if !strings.HasPrefix(r.Checks[0].Found, NoDriver) {
			t.Errorf("%v: found = %q, want it to start with %q", ret, r.Checks[0].Found, NoDriver)
		}
		if len(lib.ShutdownCalls()) != 0 {
			t.Errorf("%v: Shutdown called on a library that never initialised", ret)
		}
	}
}

func TestRunPassesCPUPoolWithoutNVML(t *testing.T) {
	t.Parallel()
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	for _, exp := range []Expectations{{Card: "cpu"}, {Card: "CPU", Probe: "true"}, {AllowNoGPU: true}} {
		r := Run(context.Background(), lib, exp)
		if !r.OK || r.Checks[0].Status != Skip || r.Checks[0].Found != NoDriver {
			t.Errorf("%+v: report = %+v, want a pass with nvml skipped", exp, r)
		}
	}
}

func TestRunFailsOtherInitErrorsEvenWhenNoGPUIsAllowed(t *testing.T) {
	t.Parallel()
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_NO_PERMISSION }}
	r := Run(context.Background(), lib, Expectations{AllowNoGPU: true})
	if r.OK || !strings.Contains(r.Checks[0].Found, "init failed") {
		t.Fatalf("report = %+v, want a failed nvml check saying init failed", r)
	}
}

func TestRunShutsNVMLDownAfterChecking(t *testing.T) {
	t.Parallel()
	s := healthyA100(t)
	Run(context.Background(), s, poolA100)
	if n := len(s.ShutdownCalls()); n != 1 {
		t.Fatalf("Shutdown called %d times, want 1", n)
	}
}

func TestRunTurnsAnNVMLPanicIntoAFailure(t *testing.T) {
	t.Parallel()
	// A mock with no SystemGetDriverVersionFunc panics when it is called,
	// as a broken library binding would.
	lib := &mock.Interface{
		InitFunc:     func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	r := Run(context.Background(), lib, poolA100)
	if r.OK || !strings.Contains(r.Summary(), "NVML panicked") {
		t.Fatalf("summary = %q, want a failure saying NVML panicked", r.Summary())
	}
}

func TestRunFailsWhenTheBudgetRunsOut(t *testing.T) {
	t.Parallel()
	s := healthyA100(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	s.DeviceGetCountFunc = func() (int, nvml.Return) {
		<-release // a hung driver
		return 8, nvml.SUCCESS
	}
	exp := poolA100
	exp.Budget = 20 * time.Millisecond
	r := Run(context.Background(), s, exp)
	last := r.Checks[len(r.Checks)-1]
	if r.OK || last.Name != CheckBudget || last.Status != Fail {
		t.Fatalf("checks = %+v, want a failed budget check last", r.Checks)
	}
	if got := failedLabels(r); !slices.Equal(got, []string{"budget"}) {
		t.Errorf("failed = %v; the checks before the hang should have passed", got)
	}
}

func TestRunRejectsInvalidExpectationsNamingTheField(t *testing.T) {
	t.Parallel()
	r := Run(context.Background(), healthyA100(t), Expectations{CUDA: "twelve"})
	if r.OK || r.Checks[0].Name != CheckExpectations || !strings.HasPrefix(r.Checks[0].Found, "cuda: ") {
		t.Fatalf("report = %+v, want a failed expectations check naming cuda", r)
	}
}

func TestRunProbe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, probe string
		timeout     time.Duration
		status      Status
		found       string
	}{
		{"exit 0 passes", "exit 0", time.Minute, Pass, "exit 0 in"},
		{"non-zero exit fails with its output", "echo CUDA error: no kernel image >&2; exit 3", time.Minute, Fail, "exit status 3 after"},
		{"timeout fails and kills the probe", "sleep 30", 50 * time.Millisecond, Fail, "timed out after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			exp := poolA100
			exp.Probe, exp.ProbeTimeout = tt.probe, tt.timeout
			r := Run(context.Background(), healthyA100(t), exp)
			last := r.Checks[len(r.Checks)-1]
			if last.Name != CheckProbe || last.Status != tt.status || !strings.Contains(last.Found, tt.found) {
				t.Fatalf("probe result = %+v, want %s with %q", last, tt.status, tt.found)
			}
			if tt.status == Fail && r.OK {
				t.Error("report OK despite a failed probe")
			}
		})
	}
	t.Run("output is kept", func(t *testing.T) {
		t.Parallel()
		_, found, _ := runProbe(context.Background(), "echo no kernel image; exit 1", time.Minute)
		if !strings.HasSuffix(found, ": no kernel image") {
			t.Errorf("found = %q, want the probe's output", found)
		}
	})
}

func TestReportRoundTripsThroughJSON(t *testing.T) {
	t.Parallel()
	s := healthyA100(t)
	device(s, 7).GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 91, nvml.SUCCESS }
	r := Run(context.Background(), s, poolA100)
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Summary() != r.Summary() || back.OK != r.OK || len(back.Checks) != len(r.Checks) || !back.StartedAt.Equal(r.StartedAt) {
		t.Fatalf("round trip changed the report:\n%s\n%s", r.Summary(), back.Summary())
	}
	if !strings.Contains(string(data), `"name":"driver","expected":"550.*","found":"550.54.15","status":"pass"`) {
		t.Errorf("stored form lost its field names: %s", data[:200])
	}
}
