// The Admin gRPC service: status, clients, models, residency and statistics,
// read from the daemon's parts. Every call is quick and never blocks on a
// device; the caller must pass the access policy (no session is needed).
#ifndef BLOCKSWAP_DAEMON_ADMIN_SERVICE_H_
#define BLOCKSWAP_DAEMON_ADMIN_SERVICE_H_

#include <map>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/time/time.h"
#include "blockswap/v1/blockswap.grpc.pb.h"
#include "daemon/device_worker.h"
#include "daemon/model_store.h"
#include "daemon/peer_registry.h"
#include "daemon/session_manager.h"
#include "daemon/work_queue.h"
#include "shared/backend.h"

namespace blockswap::daemon {

// What the Admin service reports on; everything must outlive the service.
struct AdminSources {
  const Backend* backend = nullptr;
  const ModelStore* store = nullptr;
  const SessionManager* sessions = nullptr;
  std::map<std::string, const DeviceWorker*> workers;  // by device UUID
  uint64_t boot_id = 0;
  absl::Time started_at;
  // For EvictModel and VerifyModel (which re-hashes on `work`, off the
  // reactor); both answer UNIMPLEMENTED when these are null.
  ModelStore* models = nullptr;
  WorkQueue* work = nullptr;
};

// The replies, built without gRPC so that tests can call them directly.
v1::StatusReply BuildStatus(const AdminSources& sources);
v1::ClientsReply BuildClients(const AdminSources& sources);
v1::ModelsReply BuildModels(const AdminSources& sources);
v1::ResidencyReply BuildResidency(const AdminSources& sources);
v1::StatsReply BuildStats(const AdminSources& sources);
// Every worker's trace and every ring's client trace (grouped by session),
// events at or after request.since_ns.
v1::TraceReply BuildTrace(const AdminSources& sources, const v1::TraceRequest& request);

class AdminService final : public v1::Admin::CallbackService {
 public:
  AdminService(AdminSources sources, const PeerRegistry& peers)
      : sources_(std::move(sources)), peers_(peers) {}

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const v1::StatusRequest* request,
                                   v1::StatusReply* reply) override;
  grpc::ServerUnaryReactor* Clients(grpc::CallbackServerContext* context,
                                    const v1::ClientsRequest* request,
                                    v1::ClientsReply* reply) override;
  grpc::ServerUnaryReactor* Models(grpc::CallbackServerContext* context,
                                   const v1::ModelsRequest* request,
                                   v1::ModelsReply* reply) override;
  grpc::ServerUnaryReactor* Residency(grpc::CallbackServerContext* context,
                                      const v1::ResidencyRequest* request,
                                      v1::ResidencyReply* reply) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context,
                                  const v1::StatsRequest* request,
                                  v1::StatsReply* reply) override;
  grpc::ServerUnaryReactor* Trace(grpc::CallbackServerContext* context,
                                  const v1::TraceRequest* request,
                                  v1::TraceReply* reply) override;
  grpc::ServerUnaryReactor* VerifyModel(grpc::CallbackServerContext* context,
                                        const v1::VerifyModelRequest* request,
                                        v1::VerifyModelReply* reply) override;
  grpc::ServerUnaryReactor* EvictModel(grpc::CallbackServerContext* context,
                                       const v1::EvictModelRequest* request,
                                       v1::EvictModelReply* reply) override;

 private:
  template <typename Reply>
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, Reply* reply,
                                   Reply (*build)(const AdminSources&));

  const AdminSources sources_;
  const PeerRegistry& peers_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_ADMIN_SERVICE_H_
