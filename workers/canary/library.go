package canary

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// Library is the part of NVML the canary uses. The real one comes from
// System; tests pass go-nvml's mock.Interface or one of its DGX servers.
type Library interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	SystemGetDriverVersion() (string, nvml.Return)
	SystemGetCudaDriverVersion() (int, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(index int) (nvml.Device, nvml.Return)
}

// System returns the host's NVML, loaded from libnvidia-ml.so.1 when Init is
// called; on a host without the library Init returns
// nvml.ERROR_LIBRARY_NOT_FOUND, which the canary reports as NoDriver.
func System() Library { return nvml.New() }
