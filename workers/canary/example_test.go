package canary_test

import (
	"context"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/gpuq/gpuq/workers/canary"
)

func ExampleCardMatches() {
	fmt.Println(canary.CardMatches("NVIDIA H100 80GB HBM3", "H100"))
	fmt.Println(canary.CardMatches("NVIDIA A100-SXM4-80GB", "A100-80GB"))
	fmt.Println(canary.CardMatches("NVIDIA A100-SXM4-40GB", "A100-80GB"))
	// Output:
	// true
	// true
	// false
}

// A DGX A100 with 40GB cards, checked against a pool of 80GB cards: every
// device fails the card check and says what it found.
func ExampleRun() {
	node := dgxa100.New()
	for _, d := range node.Devices {
		dev := d.(*dgxa100.Device)
		dev.MemoryInfo.Free = dev.MemoryInfo.Total
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 40, nvml.SUCCESS }
		dev.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 0, nvml.SUCCESS }
		dev.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS }
		dev.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
	}
	r := canary.Run(context.Background(), node, canary.Expectations{Card: "A100-80GB", Count: 8, Driver: "550", CUDA: "12.4"})
	fmt.Println("ok:", r.OK)
	for _, f := range r.Failures()[:2] {
		fmt.Printf("%s: expected %s, found %s\n", f.Label(), f.Expected, f.Found)
	}
	// Output:
	// ok: false
	// card[0]: expected A100-80GB, found Mock NVIDIA A100-SXM4-40GB
	// card[1]: expected A100-80GB, found Mock NVIDIA A100-SXM4-40GB
}

// The worker asks the gate before each pull, runs the canary when it is due,
// and stops for good once the node is quarantined.
func ExampleGate() {
	gate, _ := canary.NewGate(canary.Schedule{EveryJobs: 2, QuarantineAfter: 2})
	now := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	bad := canary.Report{Checks: []canary.Result{{Name: "cuda", Expected: "≥ 12.4", Found: "12.2", Status: canary.Fail}}}

	fmt.Println(gate.Due(now), gate.Observe(now, canary.Report{OK: true}), gate.MayPull(now))
	gate.JobDone()
	gate.JobDone()
	fmt.Println(gate.Due(now), gate.Observe(now, bad))
	now = now.Add(time.Minute)
	fmt.Println(gate.Due(now), gate.Observe(now, bad), gate.MayPull(now))
	fmt.Println(gate.Reason())
	// Output:
	// true healthy true
	// true failing
	// true quarantined false
	// node quarantined after 2 canary failures in a row: cuda: expected ≥ 12.4, found 12.2
}
