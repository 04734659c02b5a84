// How much memory blockswapd may use on this machine: the physical memory,
// or the limit of the memory cgroup it runs in when that is lower (systemd's
// MemoryMax=, a container's limit). max_memory_bytes = "auto" (the default)
// is three quarters of it: the rest is the daemon's own working memory
// (gRPC, the per-ring control blocks, page tables), so that a daemon whose
// budget is full is still far from its cgroup's OOM killer.
#ifndef BLOCKSWAP_DAEMON_BUDGET_MEMORY_LIMIT_H_
#define BLOCKSWAP_DAEMON_BUDGET_MEMORY_LIMIT_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace blockswap::daemon {

struct MemoryLimit {
  uint64_t bytes = 0;
  std::string source;  // "physical memory" or "memory cgroup /x (memory.max)"
};

// The smallest of the physical memory and the limits of the process's
// memory cgroup and its ancestors (cgroup v2 memory.max or v1
// memory.limit_in_bytes, under `cgroup_root`).
MemoryLimit ProcessMemoryLimit(absl::string_view cgroup_root = "/sys/fs/cgroup");

// What max_memory_bytes = "auto" resolves to for `limit`.
inline uint64_t AutoMaxMemoryBytes(const MemoryLimit& limit) { return limit.bytes / 4 * 3; }

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_BUDGET_MEMORY_LIMIT_H_
