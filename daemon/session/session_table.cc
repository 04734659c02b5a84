#include "daemon/session/session_table.h"

#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"

namespace blockswap::daemon {

absl::StatusOr<uint64_t> SessionTable::NewSessionId() {
  if (closed_) return absl::UnavailableError("blockswapd is shutting down");
  return ++next_session_id_;
}

void SessionTable::Add(std::shared_ptr<Session> session) {
  by_token_[session->token()] = session;
  const uint64_t id = session->id();
  by_id_[id] = std::move(session);
}

absl::StatusOr<std::shared_ptr<Session>> SessionTable::Find(absl::string_view token,
                                                            const Peer& caller) const {
  auto it = by_token_.find(token);
  if (it == by_token_.end()) {
    if (closed_) {
      return absl::UnavailableError("blockswapd is shutting down (the session was ended)");
    }
    return absl::UnauthenticatedError("unknown session token (the session ended or never existed)");
  }
  const Session& session = *it->second;
  if (session.peer().pid != caller.pid || session.peer().uid != caller.uid) {
    return absl::PermissionDeniedError(absl::StrCat(
        "session ", session.id(), " belongs to pid ", session.peer().pid, " uid ",
        session.peer().uid, ", not to the caller (pid ", caller.pid, " uid ", caller.uid, ")"));
  }
  return it->second;
}

std::shared_ptr<Session> SessionTable::Remove(uint64_t session_id) {
  auto it = by_id_.find(session_id);
  if (it == by_id_.end()) return nullptr;
  std::shared_ptr<Session> session = std::move(it->second);
  by_id_.erase(it);
  by_token_.erase(session->token());
  for (auto ring = ring_owner_.begin(); ring != ring_owner_.end();) {
    ring = ring->second == session_id ? ring_owner_.erase(ring) : std::next(ring);
  }
  return session;
}

std::vector<std::shared_ptr<Session>> SessionTable::List() const {
  std::vector<std::shared_ptr<Session>> out;
  for (const auto& [id, session] : by_id_) out.push_back(session);
  return out;
}

void SessionTable::SetRingOwner(uint64_t ring_id, uint64_t session_id) {
  ring_owner_[ring_id] = session_id;
}

std::optional<uint64_t> SessionTable::RingOwner(uint64_t ring_id) const {
  auto it = ring_owner_.find(ring_id);
  if (it == ring_owner_.end()) return std::nullopt;
  return it->second;
}

}  // namespace blockswap::daemon
