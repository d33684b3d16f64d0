package canary

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Run checks the node against exp through lib and returns the report; it
// never panics and never returns without a report. A nil lib means System().
// Checks still running when exp.Budget (or ctx) runs out are abandoned and the
// report gets a failed budget check.
func Run(ctx context.Context, lib Library, exp Expectations) Report {
	start := time.Now()
	exp = exp.WithDefaults()
	report := Report{StartedAt: start.UTC(), Budget: exp.Budget}
	if err := exp.Validate(); err != nil {
		report.Checks = []Result{{Name: CheckExpectations, Expected: "valid expectations", Found: err.Error(), Status: Fail}}
		return finish(report, start)
	}
	if lib == nil {
		lib = System()
	}
	ctx, cancel := context.WithTimeout(ctx, exp.Budget)
	defer cancel()

	// NVML calls cannot be interrupted, so the checks run on their own
	// goroutine and the budget is enforced here, on the receiving side.
	results := make(chan Result)
	facts := make(chan func(*Report), 8)
	go func() {
		defer close(results)
		r := runner{ctx: ctx, exp: exp, lib: lib, out: results, facts: facts}
		r.run()
	}()
	for {
		select {
		case res, ok := <-results:
			if !ok {
				drain(facts, &report)
				return finish(report, start)
			}
			drain(facts, &report)
			report.Checks = append(report.Checks, res)
		case <-ctx.Done():
			drain(facts, &report)
			report.Checks = append(report.Checks, Result{
				Name:     CheckBudget,
				Expected: "done within " + exp.Budget.String(),
				Found:    fmt.Sprintf("still checking after %s (%v)", time.Since(start).Round(time.Millisecond), context.Cause(ctx)),
				Status:   Fail,
				Duration: time.Since(start),
			})
			return finish(report, start)
		}
	}
}

func drain(facts chan func(*Report), r *Report) {
	for {
		select {
		case f := <-facts:
			f(r)
		default:
			return
		}
	}
}

func finish(r Report, start time.Time) Report {
	r.Duration = time.Since(start)
	r.OK = len(r.Failures()) == 0
	return r
}

// runner performs the checks in order, sending each result as it completes.
type runner struct {
	ctx   context.Context
	exp   Expectations
	lib   Library
	out   chan<- Result
	facts chan<- func(*Report)
}

// emit sends a result unless the budget has run out.
func (r *runner) emit(res Result) bool {
	select {
	case r.out <- res:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// fact records something found about the node (driver, devices) on the report.
func (r *runner) fact(f func(*Report)) {
	select {
	case r.facts <- f:
	case <-r.ctx.Done():
	}
}

// timed runs one check and stamps its duration.
func (r *runner) timed(name string, gpu *int, check func() (expected, found string, st Status)) bool {
	start := time.Now()
	expected, found, st := check()
	return r.emit(Result{Name: name, GPU: gpu, Expected: expected, Found: found, Status: st, Duration: time.Since(start)})
}

func (r *runner) run() {
	defer func() {
		if p := recover(); p != nil {
			r.emit(Result{Name: CheckNVML, Expected: "NVML answers", Found: fmt.Sprintf("NVML panicked: %v", p), Status: Fail})
		}
	}()
	loaded := false
	if !r.timed(CheckNVML, nil, func() (string, string, Status) {
		ret := r.lib.Init()
		switch {
		case ret == nvml.SUCCESS:
			loaded = true
			return "loaded", "loaded", Pass
		case isNoDriver(ret) && r.exp.AllowNoGPU:
			return "loaded, or absent on a CPU-only node", NoDriver, Skip
		case isNoDriver(ret):
			return "loaded", fmt.Sprintf("%s (%s)", NoDriver, nvmlError(ret)), Fail
		default:
			return "loaded", "init failed: " + nvmlError(ret), Fail
		}
	}) {
		return
	}
	if loaded {
		defer r.lib.Shutdown()
		if !r.gpuChecks() {
			return
		}
	}
	if r.exp.Probe != "" {
		r.timed(CheckProbe, nil, func() (string, string, Status) {
			return runProbe(r.ctx, r.exp.Probe, r.exp.ProbeTimeout)
		})
	}
}

func isNoDriver(ret nvml.Return) bool {
	return ret == nvml.ERROR_LIBRARY_NOT_FOUND || ret == nvml.ERROR_DRIVER_NOT_LOADED
}

func nvmlError(ret nvml.Return) string { return ret.Error() }

// gpuChecks runs the system and per-device checks; false means the budget ran
// out.
func (r *runner) gpuChecks() bool {
	exp := r.exp
	ok := r.timed(CheckDriver, nil, func() (string, string, Status) {
		expected := driverExpectation(exp)
		v, ret := r.lib.SystemGetDriverVersion()
		if ret != nvml.SUCCESS {
			return expected, "error: " + nvmlError(ret), Fail
		}
		r.fact(func(rep *Report) { rep.Driver = v })
		return expected, v, status(driverOK(exp, v))
	}) && r.timed(CheckCUDA, nil, func() (string, string, Status) {
		expected := "any"
		if exp.CUDA != "" {
			expected = "≥ " + exp.CUDA
		}
		v, ret := r.lib.SystemGetCudaDriverVersion()
		if ret != nvml.SUCCESS {
			return expected, "error: " + nvmlError(ret), Fail
		}
		found := cudaVersion(v)
		r.fact(func(rep *Report) { rep.CUDA = found })
		if exp.CUDA == "" {
			return expected, found, Pass
		}
		want, _ := parseVersion(exp.CUDA)
		have, _ := parseVersion(found)
		return expected, found, status(compareVersions(have, want) >= 0)
	})
	if !ok {
		return false
	}
	count := 0
	if !r.timed(CheckDeviceCount, nil, func() (string, string, Status) {
		expected := fmt.Sprintf("≥ %d", exp.Count)
		n, ret := r.lib.DeviceGetCount()
		if ret != nvml.SUCCESS {
			return expected, "error: " + nvmlError(ret), Fail
		}
		count = n
		return expected, fmt.Sprint(n), status(n >= exp.Count)
	}) {
		return false
	}
	for i := range count {
		if !r.deviceChecks(i) {
			return false
		}
	}
	return true
}

func status(ok bool) Status {
	if ok {
		return Pass
	}
	return Fail
}

func driverExpectation(exp Expectations) string {
	switch {
	case exp.Driver != "" && exp.DriverMin != "":
		return fmt.Sprintf("%s.* and ≥ %s", exp.Driver, exp.DriverMin)
	case exp.Driver != "":
		if parts, _ := parseVersion(exp.Driver); len(parts) >= 3 {
			return exp.Driver
		}
		return exp.Driver + ".*"
	case exp.DriverMin != "":
		return "≥ " + exp.DriverMin
	}
	return "any"
}

func driverOK(exp Expectations, found string) bool {
	have, err := parseVersion(found)
	if err != nil {
		return exp.Driver == "" && exp.DriverMin == ""
	}
	if exp.Driver != "" {
		pin, _ := parseVersion(exp.Driver)
		if !hasPrefix(have, pin) {
			return false
		}
	}
	if exp.DriverMin != "" {
		low, _ := parseVersion(exp.DriverMin)
		if compareVersions(have, low) < 0 {
			return false
		}
	}
	return true
}

const gb = 1_000_000_000

// deviceChecks checks device i; false means the budget ran out.
func (r *runner) deviceChecks(i int) bool {
	exp := r.exp
	gpu := &i
	var dev nvml.Device
	var ret nvml.Return
	start := time.Now()
	if dev, ret = r.lib.DeviceGetHandleByIndex(i); ret != nvml.SUCCESS {
		return r.emit(Result{Name: CheckDevice, GPU: gpu, Expected: "a handle", Found: "error: " + nvmlError(ret), Status: Fail, Duration: time.Since(start)})
	}
	name, uuid := "", ""
	checks := []struct {
		name  string
		check func() (string, string, Status)
	}{
		{CheckCard, func() (string, string, Status) {
			expected := "any"
			if exp.Card != "" {
				expected = exp.Card
			}
			n, ret := dev.GetName()
			if ret != nvml.SUCCESS {
				return expected, "error: " + nvmlError(ret), Fail
			}
			name = n
			if u, ret := dev.GetUUID(); ret == nvml.SUCCESS {
				uuid = u
			}
			r.fact(func(rep *Report) { rep.Devices = append(rep.Devices, Device{Index: i, Name: name, UUID: uuid}) })
			return expected, n, status(exp.Card == "" || CardMatches(n, exp.Card))
		}},
		{CheckMemoryTotal, func() (string, string, Status) {
			return memoryCheck(dev, exp.MinMemoryGB, func(m nvml.Memory) uint64 { return m.Total })
		}},
		{CheckMemoryFree, func() (string, string, Status) {
			return memoryCheck(dev, exp.MinFreeMemoryGB, func(m nvml.Memory) uint64 { return m.Free })
		}},
		{CheckECC, func() (string, string, Status) {
			n, ret := dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
			if st, found, done := unsupported(ret, "ECC not supported or disabled"); done {
				return "0", found, st
			}
			return "0", fmt.Sprint(n), status(n == 0)
		}},
		{CheckRetiredPages, func() (string, string, Status) {
			pending, ret := dev.GetRetiredPagesPendingStatus()
			if st, found, done := unsupported(ret, "page retirement not supported"); done {
				return "none pending", found, st
			}
			if pending == nvml.FEATURE_ENABLED {
				return "none pending", "retirement pending (reset the GPU)", Fail
			}
			return "none pending", "none pending", Pass
		}},
		{CheckRemappedRows, func() (string, string, Status) {
			corr, unc, pending, failed, ret := dev.GetRemappedRows()
			if st, found, done := unsupported(ret, "row remapping not supported"); done {
				return "none pending, no failure", found, st
			}
			found := fmt.Sprintf("%d correctable, %d uncorrectable remapped", corr, unc)
			switch {
			case failed:
				return "none pending, no failure", "remapping failed; " + found, Fail
			case pending:
				return "none pending, no failure", "remapping pending (reset the GPU); " + found, Fail
			}
			return "none pending, no failure", found, Pass
		}},
		{CheckTemperature, func() (string, string, Status) {
			expected := fmt.Sprintf("≤ %d °C", exp.MaxTempC)
			t, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU)
			if ret != nvml.SUCCESS {
				return expected, "error: " + nvmlError(ret), Fail
			}
			return expected, fmt.Sprintf("%d °C", t), status(int(t) <= exp.MaxTempC)
		}},
	}
	for _, c := range checks {
		if !r.timed(c.name, gpu, c.check) {
			return false
		}
	}
	return true
}

func memoryCheck(dev nvml.Device, minGB int, pick func(nvml.Memory) uint64) (string, string, Status) {
	expected := "any"
	if minGB > 0 {
		expected = fmt.Sprintf("≥ %d GB", minGB)
	}
	m, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return expected, "error: " + nvmlError(ret), Fail
	}
	v := pick(m)
	return expected, fmt.Sprintf("%.1f GB", float64(v)/gb), status(v >= uint64(minGB)*gb)
}

// unsupported turns an NVML error into a result: a feature the card lacks is
// skipped, any other error fails. done is false on success.
func unsupported(ret nvml.Return, why string) (st Status, found string, done bool) {
	switch {
	case ret == nvml.SUCCESS:
		return "", "", false
	case errors.Is(ret, nvml.ERROR_NOT_SUPPORTED):
		return Skip, why, true
	default:
		return Fail, "error: " + nvmlError(ret), true
	}
}
