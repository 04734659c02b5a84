#include "daemon/daemon.h"

#include <grpcpp/health_check_service_interface.h>

#include <cerrno>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/budget/descriptor_model.h"
#include "daemon/budget/master_limits.h"
#include "daemon/budget/memory_limit.h"
#include "daemon/preflight.h"
#include "daemon/runtime/process_stats.h"
#include "daemon/server/metrics.h"
#include "daemon/server/parse_error_interceptor.h"
#include "daemon/session/model_visibility.h"
#include "daemon/session/random_token.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

constexpr int kWorkThreads = 2;
constexpr int kMaxMessageBytes = 64 << 20;  // layouts of models with many tensors

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(DaemonOptions options) {
  std::unique_ptr<Daemon> daemon(new Daemon(std::move(options)));
  const DaemonOptions& o = daemon->options_;
  SetLogLevel(o.log_level);
  gid_t socket_group = ListenerOptions::kKeepGroup;
  if (!o.socket_group.empty()) {
    BLOCKSWAP_ASSIGN_OR_RETURN(socket_group, ResolveSocketGroup(o.socket_group));
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(daemon->boot_id_, RandomNonZero64());
  BLOCKSWAP_ASSIGN_OR_RETURN(daemon->backend_, OpenBackend(o.backend, o.host));
  const auto& devices = daemon->backend_->devices();
  if (devices.empty()) return absl::FailedPreconditionError("the backend has no devices");
  if (daemon->backend_->kind() == BackendKind::kCuda) {
    for (const auto& device : devices) {
      const std::string& uuid = device->info().uuid;
      GpuModes modes = ProbeGpuModes(uuid);
      daemon->Log(absl::StrCat("device ", uuid, ": compute mode ", modes.compute_mode, ", MIG ",
                               modes.mig, modes.error.empty() ? "" : " (", modes.error,
                               modes.error.empty() ? "" : ")"));
      if (std::string warning = GpuModesWarning(uuid, modes); !warning.empty()) {
        blockswap::daemon::Log(LogLevel::kWarning, warning);
      }
      daemon->gpu_modes_[uuid] = std::move(modes);
    }
  }

  uint64_t max_memory_bytes = o.max_memory_bytes;
  if (max_memory_bytes == kMaxMemoryBytesAuto) {
    MemoryLimit limit = ProcessMemoryLimit();
    max_memory_bytes = AutoMaxMemoryBytes(limit);
    daemon->Log(absl::StrCat("max_memory_bytes = \"auto\": ", max_memory_bytes, " (3/4 of the ",
                             limit.bytes, " bytes of ", limit.source, ")"));
  }
  // Under registrant-group, refusals name no node-wide total: it moves with
  // models and rings of other users (docs/store.md, "Registrants and visibility").
  const std::string totals_withheld =
      o.model_access == ModelAccess::kRegistrantGroup
          ? absl::StrCat("model_access = ", ModelAccessName(o.model_access))
          : "";
  daemon->memory_ = std::make_unique<MemoryBudget>(max_memory_bytes, totals_withheld);

  ModelStoreOptions store_options{.directory = o.shm_prefix,
                                  .max_pinned_bytes = o.max_pinned_bytes,
                                  .pinning = o.pinning,
                                  .memory_budget = daemon->memory_.get(),
                                  .max_blocks = o.max_master_blocks,
                                  .uid_limits = {.max_blocks = o.max_master_blocks_per_uid,
                                                 .max_bytes = o.max_master_bytes_per_uid},
                                  .totals_withheld = totals_withheld};
  if (store_options.max_blocks == kAutoLimit) {
    const uint64_t map_count = ReadMaxMapCount();
    store_options.max_blocks = AutoMaxMasterBlocks(map_count);
    daemon->Log(absl::StrCat("max_master_blocks = \"auto\": ", store_options.max_blocks,
                             " (half of vm.max_map_count = ", map_count, ")"));
  }
  if (store_options.uid_limits.max_bytes == kAutoLimit) {
    store_options.uid_limits.max_bytes = AutoMaxMasterBytesPerUid(max_memory_bytes);
    daemon->Log(absl::StrCat("max_master_bytes_per_uid = \"auto\": ",
                             store_options.uid_limits.max_bytes, " (half of max_memory_bytes)"));
  }
  // cudaHostRegisterPortable makes one pinning valid for every device.
  BLOCKSWAP_ASSIGN_OR_RETURN(daemon->store_,
                             ModelStore::Open(std::move(store_options), devices[0].get()));

  // On the host backend a ring's "device memory" is the daemon's own memory.
  WorkerMemoryOptions worker_memory{
      .host_budget =
          daemon->backend_->kind() == BackendKind::kHost ? daemon->memory_.get() : nullptr,
      .device_reserve_bytes = o.device_memory_reserve_bytes,
      .staging_budget = daemon->memory_.get()};
  // Staging buffers wherever a master may be staged, charged to the node's
  // budget; on the host backend their memcpy gets its jitter too.
  std::optional<StagingOptions> staging;
  if (o.pinning != PinningPolicy::kAlways) {
    staging = o.staging;
    if (daemon->backend_->kind() == BackendKind::kHost) staging->jitter_us = o.host.jitter_us;
  }
  std::map<std::string, DeviceWorker*> workers;
  std::map<std::string, const DeviceWorker*> admin_workers;
  for (const auto& device : devices) {
    BLOCKSWAP_ASSIGN_OR_RETURN(
        auto worker, DeviceWorker::Start(*device, daemon->boot_id_, worker_memory, staging,
                                         /*staging_at_start=*/o.pinning == PinningPolicy::kNever,
                                         o.copy_weights));
    if (o.quotas.per_uid.device_bytes == kAutoLimit) {
      daemon->Log(absl::StrCat("max_device_bytes_per_uid = \"auto\": ", worker->ring_bytes_share(),
                               " on ", device->info().uuid,
                               " (half of what it holds for rings, per device)"));
    }
    workers[device->info().uuid] = worker.get();
    admin_workers[device->info().uuid] = worker.get();
    daemon->workers_[device->info().uuid] = std::move(worker);
  }
  daemon->sessions_ = std::make_unique<SessionManager>(*daemon->backend_, *daemon->store_, workers,
                                                       daemon->boot_id_, RequestLimits{},
                                                       ModelVisibility(o.model_access));
  daemon->sessions_->set_default_copy(o.copy);
  daemon->work_ = std::make_unique<WorkQueue>(kWorkThreads);
  daemon->verify_ = std::make_unique<VerifyQueue>(*daemon->store_, o.max_verifies_per_uid);
  daemon->blockswap_service_ = std::make_unique<BlockSwapService>(
      *daemon->sessions_, daemon->peers_, *daemon->work_);
  daemon->view_ = DaemonView{daemon->backend_.get(),  daemon->store_.get(),
                             daemon->sessions_.get(), admin_workers,
                             daemon->boot_id_,        absl::Now(),
                             daemon->verify_.get(),   &daemon->refused_connections_};
  daemon->admin_service_ = std::make_unique<AdminService>(daemon->view_, daemon->peers_);

  // grpc.health.v1.Health: SERVING until shutdown begins.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // No listening port: the listener accepts connections itself and hands
  // them over, so that it knows every caller's credentials.
  builder.RegisterService(daemon->blockswap_service_.get());
  builder.RegisterService(daemon->admin_service_.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<ParseErrorInterceptorFactory>());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // The listener's relay lets no header block longer than this through
  // (connection_relay.h); decoded, HPACK may make it longer, and gRPC then
  // refuses the stream.
  const Http2Limits http2;
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE,
                             static_cast<int>(http2.max_header_block_bytes));
  daemon->server_ = builder.BuildAndStart();
  if (daemon->server_ == nullptr) return absl::InternalError("the gRPC server did not start");

  // What max_descriptors_per_uid = "auto" is, measured once the daemon's
  // own descriptors (devices, store, gRPC server) are open; before the
  // first connection.
  const uint64_t open_files = OpenFilesLimit(), daemon_open = OpenDescriptorCount();
  daemon->auto_descriptors_per_uid_ =
      AutoMaxDescriptorsPerUid(open_files, daemon_open, o.max_connections_per_uid);
  if (o.quotas.per_uid.descriptors == kAutoLimit) {
    daemon->Log(absl::StrCat(
        "max_descriptors_per_uid = \"auto\": ", daemon->auto_descriptors_per_uid_,
        " (half of RLIMIT_NOFILE = ", open_files, " less the ", daemon_open,
        " open and a reserve of ", kDescriptorReserve, ", less ", o.max_connections_per_uid,
        " connections of ", DescriptorsOfConnection(), "; 0: unlimited)"));
  }
  daemon->sessions_->quotas().Set(daemon->Resolve(o.quotas));

  AccessPolicy policy;
  for (uid_t uid : o.allow_uids) policy.AllowUid(uid);
  for (gid_t gid : o.allow_gids) policy.AllowGid(gid);
  ListenerOptions listener_options;
  listener_options.socket_path = o.socket_path;
  listener_options.policy = std::move(policy);
  listener_options.group = socket_group;
  listener_options.refused = &daemon->refused_connections_;
  listener_options.http2 = http2;
  listener_options.max_connections_per_uid = o.max_connections_per_uid;
  listener_options.max_pending_per_uid = o.max_pending_connections_per_uid;
  listener_options.log = [d = daemon.get()](absl::string_view m) { d->Log(m); };
  BLOCKSWAP_ASSIGN_OR_RETURN(
      daemon->listener_, Listener::Start(std::move(listener_options), daemon->server_.get(),
                                         &daemon->peers_, daemon->sessions_.get()));

  if (!o.metrics_listen.empty()) {
    BLOCKSWAP_ASSIGN_OR_RETURN(
        daemon->metrics_, MetricsServer::Start(o.metrics_listen, [d = daemon.get()] {
          MetricsSnapshot snapshot = CollectMetrics(d->view_);
          for (DeviceMetrics& device : snapshot.devices) {
            if (auto it = d->gpu_modes_.find(device.uuid); it != d->gpu_modes_.end()) {
              device.compute_mode = it->second.compute_mode;
              device.mig = it->second.mig;
            }
          }
          return FormatMetrics(snapshot);
        }));
    daemon->Log(absl::StrCat("metrics on http://", o.metrics_listen, "/metrics (port ",
                             daemon->metrics_->port(), ")"));
  }
  if (auto* health = daemon->server_->GetHealthCheckService(); health != nullptr) {
    health->SetServingStatus(true);
  }

  std::vector<std::string> uuids;
  for (const auto& device : devices) uuids.push_back(device->info().uuid);
  daemon->Log(absl::StrCat(
      "ready on ", o.socket_path, ": backend ", BackendKindName(daemon->backend_->kind()),
      daemon->backend_->driver().empty() ? "" : absl::StrCat(" (", daemon->backend_->driver(), ")"),
      ", devices ", absl::StrJoin(uuids, ", "), ", masters in ", o.shm_prefix, " (",
      daemon->store_->stats().adopted, " models adopted), access ",
      daemon->listener_->policy().Describe(), ", model_access ", ModelAccessName(o.model_access)));
  return daemon;
}

Daemon::~Daemon() { Shutdown(); }

void Daemon::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (server_ != nullptr) {
    if (auto* health = server_->GetHealthCheckService(); health != nullptr) {
      health->SetServingStatus(false);
    }
  }
  if (listener_ != nullptr) listener_->StopAccepting();
  // Queued uploads, registrations, rings and verifications are answered
  // UNAVAILABLE at once and running ones end at their next check: no work
  // holds the stop past its grace (the gRPC server's shutdown below waits
  // for every call to be answered).
  if (work_ != nullptr) work_->Stop();
  if (verify_ != nullptr) verify_->Stop();
  if (sessions_ != nullptr) {
    sessions_->StopAttaching();
    absl::Time deadline = absl::Now() + options_.shutdown_grace;
    size_t attached = sessions_->session_count();
    if (attached > 0) {
      Log(absl::StrCat("shutting down: waiting up to ",
                       absl::FormatDuration(options_.shutdown_grace), " for ", attached,
                       " attached clients to detach"));
    }
    while (sessions_->session_count() > 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    // Whoever is still attached learns from its rings' status words at once.
    for (auto& [uuid, worker] : workers_) {
      worker->FailAllRings(absl::UnavailableError("blockswapd is shutting down"));
    }
    sessions_->EndAll();
  }
  metrics_.reset();  // it reads the sessions
  if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  listener_.reset();
  server_.reset();
  // Rings retired by the sessions are freed once their copies are done.
  for (auto& [uuid, worker] : workers_) {
    for (absl::Time until = absl::Now() + absl::Seconds(5); !worker->idle() && absl::Now() < until;) {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  sessions_.reset();
  verify_.reset();
  work_.reset();
  workers_.clear();
  store_.reset();  // sealed models stay on the tmpfs for the next daemon
  Log("stopped");
}

void Daemon::Reload(LogLevel log_level, const ClientQuotas& quotas) {
  SetLogLevel(log_level);
  const ClientQuotas resolved = Resolve(quotas);
  if (sessions_ != nullptr) sessions_->quotas().Set(resolved);
  std::string described;
  for (QuotaScope scope : {QuotaScope::kClient, QuotaScope::kUid}) {
    const ClientAmounts& limits =
        scope == QuotaScope::kClient ? resolved.per_client : resolved.per_uid;
    for (const QuotaKind& kind : QuotaKinds()) {
      absl::StrAppend(&described, described.empty() ? "" : ", ", QuotaKey(kind, scope), " = ",
                      QuotaValueText(limits.*kind.member));
    }
  }
  Log(absl::StrCat("reloaded: log level ", LogLevelName(log_level),
                   ", quotas (0: unlimited): ", described));
}

ClientQuotas Daemon::Resolve(ClientQuotas quotas) const {
  if (quotas.per_uid.descriptors == kAutoLimit) {
    quotas.per_uid.descriptors = auto_descriptors_per_uid_;
  }
  return quotas;
}

std::string Daemon::Describe() const {
  if (sessions_ == nullptr) return "stopped";
  return absl::StrCat(
      sessions_->draining() ? "draining: " : "serving: ", sessions_->session_count(), " clients, ",
      store_->List().size(), " models, ", store_->pinned_bytes(), " bytes pinned");
}

size_t Daemon::session_count() const {
  return sessions_ == nullptr ? 0 : sessions_->session_count();
}

void Daemon::Log(absl::string_view message) const {
  if (options_.log) {
    options_.log(message);
  } else {
    daemon::Log(LogLevel::kInfo, message);
  }
}

}  // namespace blockswap::daemon
