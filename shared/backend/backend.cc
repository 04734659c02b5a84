#include "shared/backend/backend.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "shared/backend/gpu_presence.h"
#include "shared/base/env_settings.h"
#include "shared/base/test_hooks.h"

namespace blockswap {

absl::string_view BackendKindName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kHost:
      return "host";
    case BackendKind::kCuda:
      return "cuda";
  }
  return "unknown";
}

absl::StatusOr<Device*> Backend::FindDevice(absl::string_view uuid) const {
  std::vector<std::string> known;
  for (const auto& device : devices()) {
    if (device->info().uuid == uuid) return device.get();
    known.push_back(device->info().uuid);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("device ", uuid, " is not driven by this ", BackendKindName(kind()),
                   " backend (it has: ", absl::StrJoin(known, ", "), ")"));
}

absl::StatusOr<BackendChoice> ParseBackendChoice(absl::string_view name) {
  if (name == "auto") return BackendChoice::kAuto;
  if (name == "host") return BackendChoice::kHost;
  if (name == "cuda") return BackendChoice::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", name, "' (expected auto, host or cuda)"));
}

HostBackendOptions HostBackendOptions::FromEnvironment() {
  HostBackendOptions options;
  if (const std::optional<int> devices = EnvNumber<int>(EnvSetting::kHostDevices);
      devices.has_value() && *devices > 0) {
    options.device_count = *devices;
  }
#if BLOCKSWAP_TEST_HOOKS
  if (const std::optional<int64_t> us = EnvNumber<int64_t>(EnvSetting::kHostJitterUs);
      us.has_value() && *us > 0) {
    options.jitter_us = *us;
  }
  if (const std::optional<int64_t> us = EnvNumber<int64_t>(EnvSetting::kHostCopyDelayUs);
      us.has_value() && *us > 0) {
    options.copy_delay_us = *us;
  }
  options.without_stream_words = EnvValue(EnvSetting::kHostNoStreamWords) == "1";
  if (const std::optional<uint64_t> bytes = EnvNumber<uint64_t>(EnvSetting::kHostPinLimitBytes)) {
    options.pin_limit_bytes = *bytes;
  }
#endif
  return options;
}

absl::StatusOr<std::unique_ptr<Backend>> OpenBackend(BackendChoice choice,
                                                     const HostBackendOptions& host_options) {
  switch (choice) {
    case BackendChoice::kHost:
      return OpenHostBackend(host_options);
    case BackendChoice::kCuda:
#if BLOCKSWAP_HAVE_CUDA
      return OpenCudaBackend();
#else
      return absl::FailedPreconditionError(
          "the cuda backend was requested but this build has no CUDA support "
          "(configured without the CUDA toolkit)");
#endif
    case BackendChoice::kAuto: {
      // The host backend serves only a machine with no GPU at all. A GPU that
      // is present but cannot be driven (no driver, a driver too old, devices
      // hidden, a build without CUDA) is an error that says how to choose the
      // host backend deliberately: never a silent fallback to CPU memory.
#if BLOCKSWAP_HAVE_CUDA
      absl::StatusOr<std::unique_ptr<Backend>> cuda = OpenCudaBackend();
      if (cuda.ok() || cuda.status().code() != absl::StatusCode::kFailedPrecondition) {
        return cuda;
      }
      const std::string why(cuda.status().message());
#else
      const std::string why =
          "this build of blockswap has no CUDA support (configured without the CUDA toolkit)";
#endif
      if (std::optional<std::string> gpu = FindNvidiaGpu(GpuProbeRoot()); gpu.has_value()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "backend \"auto\": this machine has an NVIDIA GPU (", *gpu,
            ") but the cuda backend cannot drive it: ", why,
            ". Fix that, or serve from CPU memory deliberately with backend = \"host\" "
            "(--backend=host)"));
      }
      return OpenHostBackend(host_options);
    }
  }
  return absl::InvalidArgumentError("unknown backend choice");
}

}  // namespace blockswap
