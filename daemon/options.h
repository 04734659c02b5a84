// DaemonOptions: everything blockswapd is started with, as the config file
// and the command line resolve it (config.h). Its own header so that the
// config reader does not include the whole daemon.
#ifndef BLOCKSWAP_DAEMON_OPTIONS_H_
#define BLOCKSWAP_DAEMON_OPTIONS_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/budget/master_limits.h"
#include "daemon/device/copy_scheduler.h"
#include "daemon/runtime/logging.h"
#include "daemon/session/model_visibility.h"
#include "daemon/session/quota.h"
#include "daemon/store/master_pinning.h"
#include "shared/backend/backend.h"
#include "shared/copy/staging_pool.h"
#include "shared/protocol/copy_path.h"

namespace blockswap::daemon {

// max_memory_bytes = "auto": three quarters of what the machine or the
// daemon's memory cgroup allows (daemon/budget/memory_limit.h).
inline constexpr uint64_t kMaxMemoryBytesAuto = UINT64_MAX;

struct DaemonOptions {
  std::string socket_path = "/run/blockswap/blockswapd.sock";
  // Group of the socket file (name or number); empty: the daemon's group.
  std::string socket_group;
  BackendChoice backend = BackendChoice::kAuto;
  HostBackendOptions host;
  // The directory of the master files (mode 0700, on a tmpfs).
  std::string shm_prefix = "/dev/shm/blockswap";
  uint64_t max_pinned_bytes = 0;  // 0: only the tmpfs's free space limits
  // Which masters are pinned and which staged (daemon/store/master_pinning.h),
  // and the staging buffers of each device (budget: left empty here).
  PinningPolicy pinning = PinningPolicy::kAuto;
  StagingOptions staging;
  // Who copies blocks into a trainer's ring, unless its client asks
  // (shared/protocol/copy_path.h).
  CopyPath copy = CopyPath::kDaemon;
  // Added to the default allow list (the daemon's uid, root, the socket's
  // group).
  std::vector<uid_t> allow_uids;
  std::vector<gid_t> allow_gids;
  // Who may open and list each model (daemon/session/model_visibility.h).
  ModelAccess model_access = ModelAccess::kAllowedUsers;
  // How long Shutdown lets attached clients detach on their own.
  absl::Duration shutdown_grace = absl::Seconds(10);
  LogLevel log_level = LogLevel::kInfo;
  // HOST:PORT of the Prometheus endpoint; empty: off.
  std::string metrics_listen;
  // Admin.VerifyModel calls one uid may have waiting or running (0: unlimited).
  uint32_t max_verifies_per_uid = 4;
  // The node's memory budget (daemon/budget/memory_budget.h); 0: unlimited.
  uint64_t max_memory_bytes = kMaxMemoryBytesAuto;
  // What the masters may hold (daemon/store/uid_holds.h,
  // daemon/budget/master_limits.h): distinct blocks on the node ("auto",
  // kAutoLimit: half of vm.max_map_count), and the blocks and bytes the
  // models of one uid may hold ("auto": half of max_memory_bytes); 0:
  // unlimited.
  uint64_t max_master_blocks = kAutoLimit;
  uint64_t max_master_blocks_per_uid = 4096;
  uint64_t max_master_bytes_per_uid = kAutoLimit;
  // A ring must leave this much of its device's memory free.
  uint64_t device_memory_reserve_bytes = uint64_t{1} << 30;
  ClientQuotas quotas = DefaultClientQuotas();
  // Each uid's weight on the copy streams (daemon/device/copy_scheduler.h);
  // a uid not listed weighs 1.
  CopyWeights copy_weights;
  // Connections of one uid open at once, and of those waiting for their
  // first message (daemon/server/listener.h); 0: unlimited.
  uint64_t max_connections_per_uid = 256;
  uint64_t max_pending_connections_per_uid = 64;
  // Exit once no session has been attached for this long (zero: never); the
  // private daemon a client library starts (daemon/idle_exit.h).
  absl::Duration idle_exit = absl::ZeroDuration();
  // The start lock of the clients that start this daemon on demand; held
  // exclusively before the daemon decides it is idle. Empty: none.
  std::string idle_exit_lock;
  std::function<void(absl::string_view)> log;  // default: stderr
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_OPTIONS_H_
