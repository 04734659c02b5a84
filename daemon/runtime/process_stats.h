// ProcessStats: the daemon's own resource use, as Prometheus' standard
// process collector names it (process_resident_memory_bytes, ...), read from
// /proc/self so that an operator sees the daemon's memory, CPU and
// descriptors beside its own metrics without a node exporter; and the
// descriptor counts the daemon sizes its quotas by.
#ifndef BLOCKSWAP_DAEMON_RUNTIME_PROCESS_STATS_H_
#define BLOCKSWAP_DAEMON_RUNTIME_PROCESS_STATS_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace blockswap::daemon {

struct ProcessStats {
  double cpu_seconds = 0;  // user + system
  uint64_t resident_memory_bytes = 0;
  uint64_t virtual_memory_bytes = 0;
  uint64_t open_fds = 0;
  uint64_t max_fds = 0;           // RLIMIT_NOFILE's soft limit
  double start_time_seconds = 0;  // since the Unix epoch
  uint64_t threads = 0;
};

// This process's, now. An error names the /proc file that could not be read.
absl::StatusOr<ProcessStats> ReadProcessStats();

// RLIMIT_NOFILE's soft limit; 0 when unlimited or unknown.
uint64_t OpenFilesLimit();
// Raises RLIMIT_NOFILE's soft limit to its hard limit, as systemd advises a
// program that needs many descriptors and never calls select() to do: a
// private daemon started from a shell inherits a soft limit of 1024 (its
// hard limit is usually far higher), which would leave each uid's "auto"
// share of descriptors at its floor. The limit in force after, as
// OpenFilesLimit.
uint64_t RaiseOpenFilesLimit();
// The descriptors this process has open (/proc/self/fd), counting the one
// that reads it; 0 when unknown.
uint64_t OpenDescriptorCount();

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_RUNTIME_PROCESS_STATS_H_
