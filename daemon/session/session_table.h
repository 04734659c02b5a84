// SessionTable: the attached sessions, by id and by token; which session
// owns each ring; and whether new sessions are still taken. Session and ring
// ids are unique for the daemon's lifetime (from 1, never reused).
// A session leaves the table with the rings it owned.
#ifndef BLOCKSWAP_DAEMON_SESSION_SESSION_TABLE_H_
#define BLOCKSWAP_DAEMON_SESSION_SESSION_TABLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/session/peer.h"
#include "daemon/session/session.h"

namespace blockswap::daemon {

// Not thread-safe: its owner's mutex guards it (SessionManager::mu_), so
// that a session is added under the same lock as its process's watch.
class SessionTable {
 public:
  // The id of a session about to be added; UNAVAILABLE once Close was called.
  absl::StatusOr<uint64_t> NewSessionId();
  // `session` has an id from NewSessionId and a token no other session has.
  void Add(std::shared_ptr<Session> session);
  // The session of `token`, if it belongs to `caller`'s process (a token is
  // good only on the connections of the process it was issued to):
  // UNAUTHENTICATED for a token not in the table (UNAVAILABLE once closed:
  // the shutdown ended it, and a client retries on that code),
  // PERMISSION_DENIED for another process's.
  absl::StatusOr<std::shared_ptr<Session>> Find(absl::string_view token, const Peer& caller) const;
  // Takes the session out of the table, and the rings it owned; null when it
  // is not in it.
  std::shared_ptr<Session> Remove(uint64_t session_id);
  // By id.
  std::vector<std::shared_ptr<Session>> List() const;
  size_t size() const { return by_id_.size(); }

  // Refuses new sessions from now on (shutdown).
  void Close() { closed_ = true; }
  bool closed() const { return closed_; }

  uint64_t NewRingId() { return ++next_ring_id_; }
  void SetRingOwner(uint64_t ring_id, uint64_t session_id);
  void ForgetRing(uint64_t ring_id) { ring_owner_.erase(ring_id); }
  // The id of the session that owns the ring, if one does.
  std::optional<uint64_t> RingOwner(uint64_t ring_id) const;

 private:
  std::map<std::string, std::shared_ptr<Session>, std::less<>> by_token_;
  std::map<uint64_t, std::shared_ptr<Session>> by_id_;
  std::map<uint64_t, uint64_t> ring_owner_;  // ring id -> session id
  uint64_t next_session_id_ = 0;
  uint64_t next_ring_id_ = 0;
  bool closed_ = false;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SESSION_SESSION_TABLE_H_
