#include "daemon/device/gpu_modes.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace blockswap::daemon {
namespace {

// Without NVML (no driver) the probe says why; with NVML the made-up UUID is
// unknown to it. Either way: "unknown" with a reason, never a guess.
TEST(GpuModes, AGpuNvmlCannotFindIsUnknownWithTheReason) {
  GpuModes modes = ProbeGpuModes("GPU-00000000-0000-0000-0000-000000000000");
  EXPECT_EQ(modes.compute_mode, "unknown");
  EXPECT_EQ(modes.mig, "unknown");
  EXPECT_TRUE(absl::StrContains(modes.error, "NVML")) << modes.error;
}

TEST(GpuModes, MigAndExclusiveModesAreWarnedAbout) {
  EXPECT_TRUE(
      absl::StrContains(GpuModesWarning("GPU-1", {.compute_mode = "default", .mig = "enabled"}),
                        "CUDA IPC does not work under MIG"));
  EXPECT_TRUE(absl::StrContains(
      GpuModesWarning("GPU-1", {.compute_mode = "exclusive-process", .mig = "disabled"}),
      "compute mode exclusive-process"));
  EXPECT_EQ(GpuModesWarning("GPU-1", {.compute_mode = "default", .mig = "disabled"}), "");
}

// An NVML that knows the GPU but answers neither question: both reasons
// are kept, in the order asked.
TEST(GpuModes, EveryNvmlErrorIsKept) {
  NvmlCalls nvml;
  nvml.handle_by_uuid = [](const char*, NvmlCalls::Device* device) {
    *device = nullptr;
    return 0;
  };
  nvml.compute_mode = [](NvmlCalls::Device, int*) { return 999; };
  nvml.mig_mode = [](NvmlCalls::Device, unsigned*, unsigned*) { return 998; };
  nvml.error_string = [](int code) { return code == 999 ? "compute failure" : "mig failure"; };
  GpuModes modes = ProbeGpuModesWith(nvml, "GPU-1");
  EXPECT_EQ(modes.compute_mode, "unknown");
  EXPECT_EQ(modes.mig, "unknown");
  EXPECT_EQ(modes.error, "compute mode: compute failure; MIG mode: mig failure");
}

}  // namespace
}  // namespace blockswap::daemon
