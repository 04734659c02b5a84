// The Admin gRPC service: status, clients, models, residency and statistics,
// read from the daemon's parts. Every call is quick and never blocks on a
// device; the caller must pass the access policy (no session is needed).
#ifndef BLOCKSWAP_DAEMON_SERVER_ADMIN_SERVICE_H_
#define BLOCKSWAP_DAEMON_SERVER_ADMIN_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "blockswap/v1/blockswap.grpc.pb.h"
#include "daemon/server/daemon_view.h"
#include "daemon/server/peer_registry.h"

namespace blockswap::daemon {

// The replies, built without gRPC so that tests can call them directly.
// The store's node-wide counters (master blocks and bytes, staged, evictions,
// file reads) are set only where ShowsStoreCounters: under registrant-group a
// before/after difference would tell a caller whether a model it cannot see
// holds content it uploaded, so only root and the daemon's uid get them
// there; otherwise BuildStatus sets store_counters_withheld to the policy
// that withheld them. `caller` null: the metrics endpoint, which has no
// caller.
bool ShowsStoreCounters(const DaemonView& view, const Peer* caller);
v1::StatusReply BuildStatus(const DaemonView& view, const Peer* caller);
// Clients, Models, Residency, Stats and Trace show only what `caller` may
// see (daemon/session/model_visibility.h): under registrant-group, unless
// privileged, its own uid's sessions, no device totals, the models it may
// see under its own names.
v1::ClientsReply BuildClients(const DaemonView& view, const Peer& caller);
v1::ModelsReply BuildModels(const DaemonView& view, const Peer& caller);
v1::ResidencyReply BuildResidency(const DaemonView& view, const Peer& caller);
v1::StatsReply BuildStats(const DaemonView& view, const Peer& caller);
// Every worker's trace and every ring's client trace (grouped by session),
// events at or after request.since_ns.
v1::TraceReply BuildTrace(const DaemonView& view, const v1::TraceRequest& request,
                          const Peer& caller);

class AdminService final : public v1::Admin::CallbackService {
 public:
  AdminService(DaemonView view, const PeerRegistry& peers)
      : view_(std::move(view)), peers_(peers) {}

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
  // `build(view, caller)` for an allowed caller.
  template <typename Reply, typename Build>
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, Reply* reply, Build build);
  // NOT_FOUND, as for an unknown id, unless `caller` may see the model.
  absl::Status CheckVisible(const Peer& caller, const std::string& model_id) const;

  const DaemonView view_;
  const PeerRegistry& peers_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SERVER_ADMIN_SERVICE_H_
