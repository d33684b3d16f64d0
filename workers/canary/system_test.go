package canary

import (
	"context"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestSystemWithoutDriverReportsNoDriver loads the real libnvidia-ml. On a
// host without an NVIDIA driver (as CI machines are) it proves the canary
// reports that cleanly instead of panicking; on a GPU host it is skipped and
// `make test/gpu` covers the real driver.
func TestSystemWithoutDriverReportsNoDriver(t *testing.T) {
	probe := System()
	if ret := probe.Init(); ret == nvml.SUCCESS {
		probe.Shutdown()
		t.Skip("this host has an NVIDIA driver; make test/gpu checks it")
	}
	r := Run(context.Background(), nil, Expectations{Card: "H100"})
	if r.OK || len(r.Checks) != 1 || !strings.HasPrefix(r.Checks[0].Found, NoDriver) {
		t.Fatalf("report = %+v, want one failed nvml check saying %q", r, NoDriver)
	}
	cpu := Run(context.Background(), System(), Expectations{Card: "cpu"})
	if !cpu.OK {
		t.Fatalf("cpu pool without a driver failed: %s", cpu.Summary())
	}
}
