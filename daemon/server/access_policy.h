// Which local users may use blockswapd (docs/rules.md, "Peer credentials").
//
// The socket file's mode keeps most users from connecting at all; the policy
// is checked on every accepted connection with the kernel's credentials, so
// it holds even where the mode is looser (or was, briefly, while the socket
// was being created).
#ifndef BLOCKSWAP_DAEMON_SERVER_ACCESS_POLICY_H_
#define BLOCKSWAP_DAEMON_SERVER_ACCESS_POLICY_H_

#include <sys/types.h>

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "daemon/session/peer.h"

namespace blockswap::daemon {

// An allow list of uids and gids: a peer is allowed when its uid is listed or
// its primary or any supplementary group is. Thread-compatible (the listener
// fixes it before serving and only reads it afterwards).
class AccessPolicy {
 public:
  // The default: the daemon's effective uid, root, and the socket file's
  // group — which the listener adds once it has created the socket
  // (ResolveSocketGroup).
  AccessPolicy();

  // Exactly these ids; the socket's group is not added.
  static AccessPolicy Only(std::vector<uid_t> uids, std::vector<gid_t> gids);

  void AllowUid(uid_t uid) { uids_.insert(uid); }
  void AllowGid(gid_t gid) { gids_.insert(gid); }

  // Whether the socket file's group is still to be added.
  bool wants_socket_group() const { return wants_socket_group_; }
  // Called by the listener with the group of the socket file it created.
  void ResolveSocketGroup(gid_t group);

  const std::set<uid_t>& uids() const { return uids_; }
  const std::set<gid_t>& gids() const { return gids_; }

  bool Allows(uid_t uid, gid_t gid, absl::Span<const gid_t> groups) const;

  // OK, or PERMISSION_DENIED saying who was refused and what is allowed:
  // "uid 1234 (gid 1234) is not allowed by this blockswapd; allowed uids: 0,
  // 1000; gids: 996".
  absl::Status Check(uid_t uid, gid_t gid, absl::Span<const gid_t> groups) const;
  absl::Status Check(const PeerCredentials& peer) const {
    return Check(peer.uid, peer.gid, peer.groups);
  }
  absl::Status Check(const Peer& peer) const { return Check(peer.uid, peer.gid, peer.groups); }

  // "allowed uids: 0, 1000; gids: 996".
  std::string Describe() const;

 private:
  std::set<uid_t> uids_;
  std::set<gid_t> gids_;
  bool wants_socket_group_ = false;
};

// The supplementary groups on the "Groups:" line of a /proc/<pid>/status text.
absl::StatusOr<std::vector<gid_t>> ParseProcStatusGroups(absl::string_view status);

// The supplementary groups of process `pid`, from /proc/<pid>/status. Used
// only where the kernel lacks SO_PEERGROUPS: /proc shows the groups now, not
// at connect(), and the pid may have been reused, so the listener reads it
// while holding the peer's pidfd and checks that the process is still alive
// afterwards (ReadSupplementaryGroupsOf).
absl::StatusOr<std::vector<gid_t>> ReadSupplementaryGroups(pid_t pid);

// ReadSupplementaryGroups, then a check through `pidfd` that the process
// still lives (so `pid` was not reused while /proc was read).
absl::StatusOr<std::vector<gid_t>> ReadSupplementaryGroupsOf(pid_t pid, const UniqueFd& pidfd);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SERVER_ACCESS_POLICY_H_
