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

// What max_device_bytes_per_uid = "auto" resolves to on one device, whose
// rings are charged per device: half of what the device holds for rings —
// its memory (`device_bytes`) less device_memory_reserve_bytes, and where
// its memory is the host's (the host backend) at most max_memory_bytes
// (`host_budget_bytes`, resolved; 0: unlimited), which its rings are charged
// to. Half, so that one uid's rings leave the other half to everyone else's.
inline uint64_t AutoMaxDeviceBytesPerUid(uint64_t device_bytes, uint64_t reserve_bytes,
                                         uint64_t host_budget_bytes) {
  uint64_t room = device_bytes > reserve_bytes ? device_bytes - reserve_bytes : 0;
  if (host_budget_bytes != 0 && host_budget_bytes < room) room = host_budget_bytes;
  return room / 2;
}

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_BUDGET_MEMORY_LIMIT_H_
