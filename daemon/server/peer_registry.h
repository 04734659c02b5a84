// Maps a gRPC call's connection to the peer the listener accepted.
//
// gRPC 1.51 names a connection handed over with AddInsecureChannelFromFd
// "fd:N" (ServerContext::peer()), N being the descriptor number — which the
// kernel reuses once gRPC closes it. So each entry carries the connection id,
// and the listener removes an entry only while it is still that connection's
// (it learns of the hang-up through a duplicate of the descriptor it keeps).
#ifndef BLOCKSWAP_DAEMON_SERVER_PEER_REGISTRY_H_
#define BLOCKSWAP_DAEMON_SERVER_PEER_REGISTRY_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/session/peer.h"

namespace grpc {
class ServerContextBase;
}  // namespace grpc

namespace blockswap::daemon {

// Thread-safe: the listener's thread writes, gRPC's threads look up.
//
// A call should look its peer up while it runs: gRPC closes a connection's
// descriptor (so that its number can be reused) only after every call on it
// has finished, so during a call "fd:N" cannot name another connection. An
// entry disappears as soon as its peer hangs up, so a call still running for
// a peer that has gone may find nothing.
class PeerRegistry {
 public:
  // "fd:N", the name gRPC gives the connection on descriptor `fd`.
  static std::string GrpcPeerName(int fd);

  // Makes `peer` the connection behind `grpc_peer`, replacing any entry left
  // by an earlier connection that had the same descriptor number.
  void Register(const std::string& grpc_peer, Peer peer) ABSL_LOCKS_EXCLUDED(mu_);

  // Removes the entry for `grpc_peer` if it is still connection
  // `connection_id`; returns whether it did.
  bool Remove(absl::string_view grpc_peer, uint64_t connection_id) ABSL_LOCKS_EXCLUDED(mu_);

  // The peer behind ServerContext::peer(); UNAUTHENTICATED when the
  // connection did not come through the listener or its peer has hung up.
  absl::StatusOr<Peer> Lookup(absl::string_view grpc_peer) const ABSL_LOCKS_EXCLUDED(mu_);

  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, Peer> peers_ ABSL_GUARDED_BY(mu_);
};

// The caller of a gRPC call: its connection's peer, if the access policy
// admits it (UNAUTHENTICATED for a connection the listener did not accept,
// PERMISSION_DENIED with the reason otherwise). Every service method starts
// here.
absl::StatusOr<Peer> CallerOf(const PeerRegistry& peers, const grpc::ServerContextBase& context);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SERVER_PEER_REGISTRY_H_
