package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"github.com/gpuq/gpuq/workers/canary"
)

// withNVML makes `gpuq canary` see lib instead of the host's NVML. Tests that
// use it do not run in parallel.
func withNVML(t *testing.T, lib canary.Library) {
	t.Helper()
	saved := openNVML
	openNVML = func() canary.Library { return lib }
	t.Cleanup(func() { openNVML = saved })
}

// dgxH100Mock is a DGX with 8 H100s on driver 550.54.15 and CUDA 12.4, in
// good health.
func dgxH100Mock() *dgxa100.Server {
	s := dgxa100.NewWithGPUs(gpus.Multiple(8, gpus.H100_SXM5_80GB)...)
	for _, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		dev.MemoryInfo.Free = dev.MemoryInfo.Total
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 41, nvml.SUCCESS }
		dev.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 0, nvml.SUCCESS }
		dev.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		dev.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
	}
	return s
}

func runGpuq(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gpuq.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const poolsYAML = `
pools:
  - pool: h100-eu
    provider: sim
    canary:
      card: H100
      count: 8
      driver: "550"
      cuda: "12.4"
      min_memory_gb: 80
      budget: 45s
  - pool: a100-80
    canary:
      card: A100-80GB
  - pool: bad
    canary:
      cuda: twelve
  - pool: cpu-eu
    canary:
      card: cpu
  - pool: typo
    canary:
      card: H100
      min_memory: 80
  - pool: words
    canary:
      count: eight
`

func TestCanaryCommandPassesAHealthyNode(t *testing.T) {
	withNVML(t, dgxH100Mock())
	code, out, errOut := runGpuq(t, "canary", "--expect-card", "H100", "--expect-count", "8", "--expect-driver", "550", "--expect-cuda", "12.4", "--min-memory-gb", "80")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q\n%s", code, errOut, out)
	}
	for _, want := range []string{"CHECK", "card[7]", "NVIDIA H100 80GB HBM3", "≥ 12.4", "canary passed in"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestCanaryCommandFailsLoudlyOnDrift(t *testing.T) {
	s := dgxH100Mock()
	s.CudaDriverVersion = 12020
	withNVML(t, s)
	code, out, errOut := runGpuq(t, "canary", "-o", "json", "--expect-card", "H100", "--expect-cuda", "12.4")
	if code != exitCanaryFailed {
		t.Fatalf("exit %d, want %d", code, exitCanaryFailed)
	}
	if !strings.Contains(errOut, "canary failed: cuda: expected ≥ 12.4, found 12.2") {
		t.Errorf("stderr %q does not say what drifted", errOut)
	}
	var r canary.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("stdout is not a JSON report: %v\n%s", err, out)
	}
	if r.OK || len(r.Failures()) != 1 || r.Failures()[0].Name != canary.CheckCUDA {
		t.Errorf("report failures = %+v, want the cuda check alone", r.Failures())
	}
}

func TestCanaryCommandReadsThePoolFromConfig(t *testing.T) {
	withNVML(t, dgxH100Mock())
	cfg := writeConfig(t, poolsYAML)

	code, out, errOut := runGpuq(t, "canary", "--config", cfg, "--pool", "h100-eu", "-o", "json")
	if code != 0 {
		t.Fatalf("h100-eu: exit %d, stderr %q", code, errOut)
	}
	var r canary.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Budget.String() != "45s" || !strings.Contains(out, `"expected": "≥ 80 GB"`) {
		t.Errorf("pool settings not applied: budget %s\n%s", r.Budget, out)
	}

	code, _, errOut = runGpuq(t, "canary", "--config", cfg, "--pool", "a100-80")
	if code != exitCanaryFailed || !strings.Contains(errOut, "card[0]: expected A100-80GB, found NVIDIA H100 80GB HBM3") {
		t.Errorf("a100-80 on H100s: exit %d, stderr %q", code, errOut)
	}

	code, _, errOut = runGpuq(t, "canary", "--config", cfg, "--pool", "h100-eu", "--expect-driver", "535")
	if code != exitCanaryFailed || !strings.Contains(errOut, "driver: expected 535.*, found 550.54.15") {
		t.Errorf("flag over pool: exit %d, stderr %q", code, errOut)
	}
}

func TestCanaryCommandRejectsBadExpectationsNamingWhereTheyCameFrom(t *testing.T) {
	withNVML(t, dgxH100Mock())
	cfg := writeConfig(t, poolsYAML)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--expect-cuda", "12.x"}, "--expect-cuda: must be"},
		{[]string{"--max-temp-c", "500"}, "--max-temp-c: must be"},
		{[]string{"--config", cfg, "--pool", "bad"}, "pools[bad].canary.cuda: must be"},
		{[]string{"--config", cfg, "--pool", "nope"}, `--pool: no pool "nope" in the config key pools; have a100-80, bad, cpu-eu, h100-eu, typo, words`},
		{[]string{"--config", cfg, "--pool", "typo"}, "pools[typo].canary.min_memory: unknown key; the canary knows card, count"},
		{[]string{"--config", cfg, "--pool", "words"}, `pools[words].canary.count: cannot read "eight" as a whole number`},
		{[]string{"--pool", "nope"}, `--pool: no pool "nope": the config has no pools`},
		{[]string{"--expect-card", "cpu", "--expect-driver", "550"}, "--expect-driver: a cpu pool"},
	}
	for _, tt := range tests {
		code, out, errOut := runGpuq(t, append([]string{"canary"}, tt.args...)...)
		if code != exitCanaryUsage || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tt.args, code, errOut, exitCanaryUsage, tt.want)
		}
		if out != "" {
			t.Errorf("%v: printed a report for expectations that were never checked:\n%s", tt.args, out)
		}
	}
	t.Setenv("GPUQ_EXPECT_DRIVER_MIN", "new")
	if code, _, errOut := runGpuq(t, "canary"); code != exitCanaryUsage || !strings.Contains(errOut, "--expect-driver-min: must be a dotted version") {
		t.Errorf("GPUQ_EXPECT_DRIVER_MIN=new: exit %d, stderr %q", code, errOut)
	}
}

// TestCanaryCommandOnThisHost uses the real NVML: on a host without a driver
// a GPU pool fails with the no-driver message and a CPU pool passes.
func TestCanaryCommandOnThisHost(t *testing.T) {
	if ret := canary.System().Init(); ret == nvml.SUCCESS {
		t.Skip("this host has an NVIDIA driver; make test/gpu checks it")
	}
	cfg := writeConfig(t, poolsYAML)
	code, out, errOut := runGpuq(t, "canary", "-o", "json")
	if code != exitCanaryFailed || !strings.Contains(out, canary.NoDriver) || !strings.Contains(errOut, canary.NoDriver) {
		t.Errorf("no driver: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	for _, args := range [][]string{{"--allow-no-gpu"}, {"--config", cfg, "--pool", "cpu-eu"}} {
		if code, out, errOut := runGpuq(t, append([]string{"canary"}, args...)...); code != 0 || !strings.Contains(out, "skip") {
			t.Errorf("%v: exit %d, stderr %q\n%s", args, code, errOut, out)
		}
	}
	t.Setenv("GPUQ_ALLOW_NO_GPU", "true")
	if code, _, errOut := runGpuq(t, "canary"); code != 0 {
		t.Errorf("GPUQ_ALLOW_NO_GPU=true: exit %d, stderr %q", code, errOut)
	}
}

// A pool's card and GPU count, as placement offers it, are what its canary
// expects unless the pool's canary section or a flag says otherwise: a CPU
// pool's worker passes on a node without NVML, and a GPU pool's checks the
// card and count it is sold as.
func TestCanaryExpectsThePoolsOwnCardAndCount(t *testing.T) {
	cfg := writeConfig(t, `
pools:
  - {pool: cpu-de, region: eu-central-1, country: DE, card: cpu, vcpu: 4}
  - {pool: h100-x8, region: eu-central-1, country: DE, card: H100, gpu_count: 8}
  - {pool: h100-x16, card: H100, gpu_count: 16}
  - {pool: says-a100, card: H100, canary: {card: A100}}
`)
	withNVML(t, &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }})
	if code, out, errOut := runGpuq(t, "canary", "--config", cfg, "--pool", "cpu-de"); code != 0 {
		t.Errorf("a CPU pool's canary on a node without NVML: exit %d, stderr %q\n%s", code, errOut, out)
	}
	withNVML(t, dgxH100Mock())
	if code, out, errOut := runGpuq(t, "canary", "--config", cfg, "--pool", "h100-x8"); code != 0 || !strings.Contains(out, "card[7]") {
		t.Errorf("8 H100s for the pool sold as 8 H100s: exit %d, stderr %q\n%s", code, errOut, out)
	}
	if code, _, errOut := runGpuq(t, "canary", "--config", cfg, "--pool", "h100-x16"); code != exitCanaryFailed || !strings.Contains(errOut, "expected ≥ 16") {
		t.Errorf("8 H100s for a pool sold as 16: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runGpuq(t, "canary", "--config", cfg, "--pool", "says-a100"); code != exitCanaryFailed || !strings.Contains(errOut, "expected A100") {
		t.Errorf("the canary section names the card over the pool's: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runGpuq(t, "canary", "--config", cfg, "--pool", "h100-x16", "--expect-count", "8"); code != 0 {
		t.Errorf("a flag over the pool's count: exit %d, stderr %q", code, errOut)
	}
}
