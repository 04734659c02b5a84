// The daemon's numbers in the Prometheus text exposition format (version
// 0.0.4), every name prefixed blockswap_. CollectMetrics reads what the
// device workers, the sessions and the model store already count (the same
// DaemonView as the Admin service); FormatMetrics is pure, so tests check the
// text without a daemon.
#ifndef BLOCKSWAP_DAEMON_SERVER_METRICS_H_
#define BLOCKSWAP_DAEMON_SERVER_METRICS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/device/device_worker.h"
#include "daemon/runtime/process_stats.h"
#include "daemon/server/daemon_view.h"
#include "daemon/session/quota.h"

namespace blockswap::daemon {

struct DeviceMetrics {
  std::string uuid = {};
  std::string name = {};
  uint64_t total_memory_bytes = 0;
  std::string error = {};            // empty: healthy
  std::string compute_mode = "n/a";  // GpuModes; "n/a" on the host backend
  std::string mig = "n/a";
  DeviceStats stats = {};
};

struct ClientMetrics {
  uint64_t session_id = 0;
  std::string client_name = {};
  uint32_t pid = 0;
  uint32_t uid = 0;
  uint32_t rings = 0;
  uint64_t ring_bytes = 0;     // device memory of its rings
  uint64_t staging_bytes = 0;  // host memory of its uploads in progress
  uint64_t loads = 0;
  uint64_t rejected_loads = 0;   // its protocol and validation errors
  uint64_t bytes = 0;            // copied into its rings
  double stall_seconds = 0;      // as the client reported them (all passes)
  double host_wait_seconds = 0;  // the same
  double copy_seconds = 0;
};

struct MetricsSnapshot {
  std::string version;
  std::string backend;  // "host" or "cuda"
  double uptime_seconds = 0;
  // False under model_access = "registrant-group": the families of the
  // store's node-wide counters (and the process's memory, which grows with
  // every new block) are left out, as Admin.Status leaves them out for all
  // but root and the daemon's uid (ShowsStoreCounters).
  bool store_counters = true;
  // False under "registrant-group" too: the per-session families (labelled
  // with session, client name, pid and uid) are left out, and only node-wide
  // sums (blockswap_sessions, the per-device families) remain. The endpoint
  // has no caller to show its own sessions to, and a per-uid view would need
  // one; the sums are the operator's capacity signal (docs/store.md, "What
  // another user can still tell").
  bool per_session_series = true;
  uint64_t pinned_bytes = 0;
  uint64_t max_pinned_bytes = 0;  // 0: no budget but the tmpfs
  uint64_t staged_bytes = 0;      // masters copied through the staging buffers
  uint64_t models = 0;
  uint64_t master_blocks = 0;  // distinct blocks
  uint64_t staged_blocks = 0;  // of master_blocks
  // Models evicted, by reason (EvictionReasonName: "operator", or the limit
  // that was short), every reason listed, in the store's order.
  std::vector<std::pair<std::string, uint64_t>> evictions;
  uint64_t file_reads = 0;
  uint64_t file_bytes_read = 0;
  uint64_t refused_connections = 0;
  uint64_t quota_refusals = 0;
  // Absent when /proc could not be read (then the families are left out).
  std::optional<ProcessStats> process;
  bool draining = false;
  ClientQuotas quotas;  // in force now (0: unlimited)
  std::vector<DeviceMetrics> devices;
  std::vector<ClientMetrics> clients;  // counted in blockswap_sessions always
};

MetricsSnapshot CollectMetrics(const DaemonView& view);
std::string FormatMetrics(const MetricsSnapshot& snapshot);

// A label value escaped as the text format wants (\\, \", \n).
std::string EscapeLabelValue(absl::string_view value);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SERVER_METRICS_H_
