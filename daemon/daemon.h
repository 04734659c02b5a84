// Daemon: blockswapd assembled — the backend, the model store, one
// DeviceWorker per device, the sessions, the gRPC services and the listener
// that accepts connections and hands them to gRPC.
#ifndef BLOCKSWAP_DAEMON_DAEMON_H_
#define BLOCKSWAP_DAEMON_DAEMON_H_

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/admin_service.h"
#include "daemon/blockswap_service.h"
#include "daemon/device_worker.h"
#include "daemon/gpu_modes.h"
#include "daemon/listener.h"
#include "daemon/logging.h"
#include "daemon/metrics_server.h"
#include "daemon/model_store.h"
#include "daemon/peer_registry.h"
#include "daemon/quota.h"
#include "daemon/session_manager.h"
#include "daemon/work_queue.h"
#include "shared/backend.h"

namespace blockswap::daemon {

struct DaemonOptions {
  std::string socket_path = "/run/blockswap/blockswapd.sock";
  // Group of the socket file (name or number); empty: the daemon's group.
  std::string socket_group;
  BackendChoice backend = BackendChoice::kAuto;
  HostBackendOptions host;
  // The directory of the master files (mode 0700, on a tmpfs).
  std::string shm_prefix = "/dev/shm/blockswap";
  uint64_t max_pinned_bytes = 0;  // 0: only the tmpfs's free space limits
  // Added to the default allow list (the daemon's uid, root, the socket's
  // group).
  std::vector<uid_t> allow_uids;
  std::vector<gid_t> allow_gids;
  // How long Shutdown lets attached clients detach on their own.
  absl::Duration shutdown_grace = absl::Seconds(10);
  LogLevel log_level = LogLevel::kInfo;
  // HOST:PORT of the Prometheus endpoint; empty: off.
  std::string metrics_listen;
  ClientQuotas quotas;
  std::function<void(absl::string_view)> log;  // default: stderr
};

class Daemon {
 public:
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(DaemonOptions options);
  // Shuts down if Shutdown was not called.
  ~Daemon();

  // Stops accepting connections and new sessions, gives attached clients
  // `shutdown_grace` to detach, then ends the remaining sessions (their rings
  // report UNAVAILABLE in the status word), finishes in-flight copies and
  // releases everything but the sealed models. Idempotent.
  void Shutdown();

  // What SIGHUP reloads: the log level and the per-client quotas.
  void Reload(LogLevel log_level, const ClientQuotas& quotas);
  // One line for systemd's STATUS=: "serving: 2 clients, 1 models, ...".
  std::string Describe() const;
  // The port of the metrics endpoint; 0 when it is off.
  int metrics_port() const { return metrics_ == nullptr ? 0 : metrics_->port(); }

  uint64_t boot_id() const { return boot_id_; }
  const Backend& backend() const { return *backend_; }

 private:
  explicit Daemon(DaemonOptions options) : options_(std::move(options)) {}
  void Log(absl::string_view message) const;

  DaemonOptions options_;
  uint64_t boot_id_ = 0;
  // Declared in dependency order, so that destruction runs the other way.
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ModelStore> store_;
  std::map<std::string, std::unique_ptr<DeviceWorker>> workers_;
  std::unique_ptr<SessionManager> sessions_;
  std::unique_ptr<WorkQueue> work_;
  PeerRegistry peers_;
  std::unique_ptr<BlockSwapService> blockswap_service_;
  std::map<std::string, GpuModes> gpu_modes_;  // by device UUID; cuda backend only
  AdminSources sources_;
  std::unique_ptr<AdminService> admin_service_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Listener> listener_;
  bool shut_down_ = false;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_DAEMON_H_
