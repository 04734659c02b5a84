#include "daemon/server/peer_registry.h"

#include <grpcpp/server_context.h>

#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

std::string PeerRegistry::GrpcPeerName(int fd) { return absl::StrCat("fd:", fd); }

void PeerRegistry::Register(const std::string& grpc_peer, Peer peer) {
  absl::MutexLock lock(&mu_);
  peers_.insert_or_assign(grpc_peer, std::move(peer));
}

bool PeerRegistry::Remove(absl::string_view grpc_peer, uint64_t connection_id) {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(std::string(grpc_peer));
  if (it == peers_.end() || it->second.connection_id != connection_id) return false;
  peers_.erase(it);
  return true;
}

absl::StatusOr<Peer> PeerRegistry::Lookup(absl::string_view grpc_peer) const {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(std::string(grpc_peer));
  if (it == peers_.end()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "connection \"", grpc_peer,
        "\" is unknown to blockswapd: it did not come through the daemon's socket listener, or "
        "its peer has already hung up"));
  }
  return it->second;
}

size_t PeerRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return peers_.size();
}

absl::StatusOr<Peer> CallerOf(const PeerRegistry& peers, const grpc::ServerContextBase& context) {
  const std::string name = context.peer();
  absl::StatusOr<Peer> peer = peers.Lookup(name);
  if (!peer.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("connection ", name, " was not accepted by blockswapd"));
  }
  BLOCKSWAP_RETURN_IF_ERROR(peer->CheckAllowed());
  return peer;
}

}  // namespace blockswap::daemon
