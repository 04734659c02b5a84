#include "daemon/device/gpu_modes.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace blockswap::daemon {
namespace {

using NvmlReturn = int;
using NvmlDevice = NvmlCalls::Device;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlNotSupported = 3;

struct Nvml : NvmlCalls {
  NvmlReturn (*init)() = nullptr;
  std::string error;  // why NVML is unusable; empty when usable
};

const Nvml& LoadNvml() {
  static const Nvml* nvml = [] {
    auto* n = new Nvml;
    void* library = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      n->error = absl::StrCat("NVML is not available (", ::dlerror(), ")");
      return n;
    }
    n->init = reinterpret_cast<decltype(n->init)>(::dlsym(library, "nvmlInit_v2"));
    n->handle_by_uuid = reinterpret_cast<decltype(n->handle_by_uuid)>(
        ::dlsym(library, "nvmlDeviceGetHandleByUUID"));
    n->compute_mode =
        reinterpret_cast<decltype(n->compute_mode)>(::dlsym(library, "nvmlDeviceGetComputeMode"));
    n->mig_mode = reinterpret_cast<decltype(n->mig_mode)>(::dlsym(library, "nvmlDeviceGetMigMode"));
    n->error_string =
        reinterpret_cast<decltype(n->error_string)>(::dlsym(library, "nvmlErrorString"));
    if (!n->init || !n->handle_by_uuid || !n->compute_mode || !n->mig_mode || !n->error_string) {
      n->error = "libnvidia-ml.so.1 lacks an entry point blockswapd needs";
    } else if (NvmlReturn r = n->init(); r != kNvmlSuccess) {
      n->error = absl::StrCat("nvmlInit failed: ", n->error_string(r));
    }
    return n;
  }();
  return *nvml;
}

}  // namespace

GpuModes ProbeGpuModes(const std::string& uuid) {
  const Nvml& nvml = LoadNvml();
  if (!nvml.error.empty()) {
    GpuModes modes;
    modes.error = nvml.error;
    return modes;
  }
  return ProbeGpuModesWith(nvml, uuid);
}

GpuModes ProbeGpuModesWith(const NvmlCalls& nvml, const std::string& uuid) {
  GpuModes modes;
  NvmlDevice device = nullptr;
  if (NvmlReturn r = nvml.handle_by_uuid(uuid.c_str(), &device); r != kNvmlSuccess) {
    modes.error = absl::StrCat("NVML does not know ", uuid, ": ", nvml.error_string(r));
    return modes;
  }
  int compute = 0;
  if (NvmlReturn r = nvml.compute_mode(device, &compute); r == kNvmlSuccess) {
    static constexpr const char* kNames[] = {"default", "exclusive-thread", "prohibited",
                                             "exclusive-process"};
    modes.compute_mode = compute >= 0 && compute < 4 ? kNames[compute] : "unknown";
  } else {
    modes.error = absl::StrCat("compute mode: ", nvml.error_string(r));
  }
  unsigned current = 0, pending = 0;
  if (NvmlReturn r = nvml.mig_mode(device, &current, &pending); r == kNvmlSuccess) {
    modes.mig = current == 1 ? "enabled" : "disabled";
  } else if (r == kNvmlNotSupported) {
    modes.mig = "disabled";  // a GPU without MIG
  } else {
    // After the compute mode's error, if there was one: both are kept.
    absl::StrAppend(&modes.error, modes.error.empty() ? "" : "; ",
                    "MIG mode: ", nvml.error_string(r));
  }
  return modes;
}

std::string GpuModesWarning(const std::string& uuid, const GpuModes& modes) {
  if (modes.mig == "enabled") {
    return absl::StrCat("device ", uuid,
                        " has MIG enabled: CUDA IPC does not work under MIG, so trainers cannot "
                        "import rings on it");
  }
  if (modes.compute_mode == "prohibited" || modes.compute_mode == "exclusive-process" ||
      modes.compute_mode == "exclusive-thread") {
    return absl::StrCat("device ", uuid, " is in compute mode ", modes.compute_mode,
                        ": the daemon's context keeps trainers off it (use the default mode)");
  }
  return "";
}

}  // namespace blockswap::daemon
