// The compute mode and MIG state of a GPU, read through NVML by the GPU's
// UUID. libnvidia-ml.so.1 is loaded with dlopen, never linked (like libcuda:
// a binary that needs it would not start on a machine without a driver).
//
// Both matter to blockswap: a GPU in exclusive-process or prohibited compute
// mode cannot hold the daemon's and a trainer's contexts at once, and CUDA
// IPC (the rings' memory and events) does not work between processes on MIG
// instances.
#ifndef BLOCKSWAP_DAEMON_DEVICE_GPU_MODES_H_
#define BLOCKSWAP_DAEMON_DEVICE_GPU_MODES_H_

#include <string>

namespace blockswap::daemon {

struct GpuModes {
  // "default", "exclusive-thread", "prohibited", "exclusive-process", or
  // "unknown" when NVML could not tell (`error` says why).
  std::string compute_mode = "unknown";
  // "disabled", "enabled", or "unknown".
  std::string mig = "unknown";
  std::string error = {};  // empty when both were read
};

// Thread-compatible; loads NVML on first use and keeps it loaded.
GpuModes ProbeGpuModes(const std::string& uuid);

// The NVML entry points the probe calls, with NVML's C types spelled out
// (nvmlReturn_t is an int, 0 success, 3 not supported; nvmlDevice_t a
// pointer), so that a test can stand in for NVML.
struct NvmlCalls {
  using Device = struct NvmlDeviceOpaque*;
  int (*handle_by_uuid)(const char*, Device*) = nullptr;
  int (*compute_mode)(Device, int*) = nullptr;
  int (*mig_mode)(Device, unsigned*, unsigned*) = nullptr;
  const char* (*error_string)(int) = nullptr;
};
// ProbeGpuModes with `nvml` (initialised): every error it meets is kept in
// `error`, in the order met.
GpuModes ProbeGpuModesWith(const NvmlCalls& nvml, const std::string& uuid);

// The warning the daemon logs for a device whose modes keep clients out;
// empty when there is none.
std::string GpuModesWarning(const std::string& uuid, const GpuModes& modes);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_DEVICE_GPU_MODES_H_
