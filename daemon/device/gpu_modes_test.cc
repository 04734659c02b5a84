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

}  // namespace
}  // namespace blockswap::daemon
