// Whether this machine has an NVIDIA GPU, whatever state its driver is in:
// what `backend = "auto"` needs to tell "no GPU here" (the host backend
// serves) from "a GPU that cannot be driven" (the daemon refuses to start:
// serving a GPU node from CPU memory without saying so is a silent fallback:
// docs/rules.md, "No silent fallback").
//
// The evidence is read from the kernel's files, not from CUDA (which is what
// failed): a PCI function of NVIDIA (vendor 0x10de) whose class is a display
// or 3D controller, the driver's /proc/driver/nvidia/gpus/ entries, or a
// /dev/nvidia<N> device node.
#ifndef BLOCKSWAP_SHARED_BACKEND_GPU_PRESENCE_H_
#define BLOCKSWAP_SHARED_BACKEND_GPU_PRESENCE_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace blockswap {

// The first piece of evidence found under `root` (a directory laid out like
// "/"; tests pass a tree of their own), e.g. "PCI device 0000:17:00.0 (NVIDIA,
// class 0x030200)"; nullopt when there is none.
std::optional<std::string> FindNvidiaGpu(absl::string_view root = "/");

// The root FindNvidiaGpu reads for `backend = "auto"`: "/", or in a build
// with test hooks (shared/base/test_hooks.h) the one that
// $BLOCKSWAP_GPU_PROBE_ROOT names (the tests' fake machines).
std::string GpuProbeRoot();

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_BACKEND_GPU_PRESENCE_H_
