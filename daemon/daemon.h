// Daemon: blockswapd assembled — the backend, the model store, one
// DeviceWorker per device, the sessions, the gRPC services and the listener
// that accepts connections and hands them to gRPC.
#ifndef BLOCKSWAP_DAEMON_DAEMON_H_
#define BLOCKSWAP_DAEMON_DAEMON_H_

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/budget/memory_budget.h"
#include "daemon/device/device_worker.h"
#include "daemon/device/gpu_modes.h"
#include "daemon/options.h"
#include "daemon/runtime/logging.h"
#include "daemon/server/admin_service.h"
#include "daemon/server/blockswap_service.h"
#include "daemon/server/listener.h"
#include "daemon/server/metrics_server.h"
#include "daemon/server/peer_registry.h"
#include "daemon/server/verify_queue.h"
#include "daemon/server/work_queue.h"
#include "daemon/session/quota.h"
#include "daemon/session/session_manager.h"
#include "daemon/store/model_store.h"
#include "shared/backend/backend.h"

namespace blockswap::daemon {

class Daemon {
 public:
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(DaemonOptions options);
  // Shuts down if Shutdown was not called.
  ~Daemon();

  // Stops accepting connections and new sessions, cancels the slow work
  // queued or running (answered UNAVAILABLE), gives attached clients
  // `shutdown_grace` to detach, then ends the remaining sessions (their rings
  // report UNAVAILABLE in the status word), finishes in-flight copies and
  // releases everything but the sealed models. Idempotent.
  void Shutdown();

  // What SIGHUP reloads: the log level and the per-client and per-uid quotas.
  void Reload(LogLevel log_level, const ClientQuotas& quotas);
  // One line for systemd's STATUS=: "serving: 2 clients, 1 models, ...".
  std::string Describe() const;
  // Sessions attached now (the idle exit's measure).
  size_t session_count() const;
  // The port of the metrics endpoint; 0 when it is off.
  int metrics_port() const { return metrics_ == nullptr ? 0 : metrics_->port(); }

  uint64_t boot_id() const { return boot_id_; }
  const Backend& backend() const { return *backend_; }
  const MemoryBudget& memory_budget() const { return *memory_; }

 private:
  explicit Daemon(DaemonOptions options) : options_(std::move(options)) {}
  void Log(absl::string_view message) const;

  // max_descriptors_per_uid = "auto" replaced by what it resolved to at
  // start; the other "auto"s are resolved where they are used.
  ClientQuotas Resolve(ClientQuotas quotas) const;

  DaemonOptions options_;
  uint64_t auto_descriptors_per_uid_ = 0;  // AutoMaxDescriptorsPerUid at start
  uint64_t boot_id_ = 0;
  // Declared in dependency order, so that destruction runs the other way.
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<MemoryBudget> memory_;  // max_memory_bytes, resolved
  std::unique_ptr<ModelStore> store_;
  std::map<std::string, std::unique_ptr<DeviceWorker>> workers_;
  std::unique_ptr<SessionManager> sessions_;
  std::unique_ptr<WorkQueue> work_;
  std::unique_ptr<VerifyQueue> verify_;
  PeerRegistry peers_;
  std::atomic<uint64_t> refused_connections_{0};  // the listener counts, the metrics read
  std::unique_ptr<BlockSwapService> blockswap_service_;
  std::map<std::string, GpuModes> gpu_modes_;  // by device UUID; cuda backend only
  DaemonView view_;
  std::unique_ptr<AdminService> admin_service_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Listener> listener_;
  bool shut_down_ = false;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_DAEMON_H_
