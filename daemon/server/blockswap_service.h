// The BlockSwap gRPC service: thin. Each method finds the caller (the
// listener's PeerRegistry, by the connection the call came on), checks the
// access policy and the session token, and hands the request to the
// SessionManager; slow work (hashing an upload, reading a model file,
// allocating a ring) runs on the WorkQueue so that no reactor ever blocks, in
// its caller's uid's turn, and stops when the call is cancelled (its client
// left, its deadline passed) or the daemon stops.
#ifndef BLOCKSWAP_DAEMON_SERVER_BLOCKSWAP_SERVICE_H_
#define BLOCKSWAP_DAEMON_SERVER_BLOCKSWAP_SERVICE_H_

#include <memory>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "blockswap/v1/blockswap.grpc.pb.h"
#include "daemon/server/peer_registry.h"
#include "daemon/session/session_manager.h"
#include "daemon/server/work_queue.h"

namespace blockswap::daemon {

class BlockSwapService final : public v1::BlockSwap::CallbackService {
 public:
  // All arguments must outlive the service.
  BlockSwapService(SessionManager& sessions, const PeerRegistry& peers, WorkQueue& work)
      : sessions_(sessions), peers_(peers), work_(work) {}

  grpc::ServerUnaryReactor* Attach(grpc::CallbackServerContext* context,
                                   const v1::AttachRequest* request,
                                   v1::AttachReply* reply) override;
  grpc::ServerUnaryReactor* Detach(grpc::CallbackServerContext* context,
                                   const v1::DetachRequest* request,
                                   v1::DetachReply* reply) override;
  grpc::ServerUnaryReactor* BeginUpload(grpc::CallbackServerContext* context,
                                        const v1::BeginUploadRequest* request,
                                        v1::BeginUploadReply* reply) override;
  grpc::ServerUnaryReactor* CommitUpload(grpc::CallbackServerContext* context,
                                         const v1::CommitUploadRequest* request,
                                         v1::ModelReply* reply) override;
  grpc::ServerUnaryReactor* OpenModel(grpc::CallbackServerContext* context,
                                      const v1::OpenModelRequest* request,
                                      v1::ModelReply* reply) override;
  grpc::ServerUnaryReactor* HeldBlocks(grpc::CallbackServerContext* context,
                                       const v1::HeldBlocksRequest* request,
                                       v1::HeldBlocksReply* reply) override;
  grpc::ServerUnaryReactor* CreateRing(grpc::CallbackServerContext* context,
                                       const v1::CreateRingRequest* request,
                                       v1::RingDescriptor* reply) override;
  grpc::ServerUnaryReactor* DestroyRing(grpc::CallbackServerContext* context,
                                        const v1::DestroyRingRequest* request,
                                        v1::DestroyRingReply* reply) override;
  grpc::ServerUnaryReactor* ReportStats(grpc::CallbackServerContext* context,
                                        const v1::ReportStatsRequest* request,
                                        v1::ReportStatsReply* reply) override;
  grpc::ServerUnaryReactor* RegisterFile(grpc::CallbackServerContext* context,
                                         const v1::RegisterFileRequest* request,
                                         v1::RegisterFileReply* reply) override;
  grpc::ServerBidiReactor<v1::LoadRequest, v1::LoadEvent>* Load(
      grpc::CallbackServerContext* context) override;

 private:
  absl::StatusOr<std::shared_ptr<Session>> SessionOf(grpc::CallbackServerContext* context,
                                                     const std::string& token) const;

  SessionManager& sessions_;
  const PeerRegistry& peers_;
  WorkQueue& work_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SERVER_BLOCKSWAP_SERVICE_H_
