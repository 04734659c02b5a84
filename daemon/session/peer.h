// Who is on the other end of a connection to blockswapd, as the kernel says.
//
// The listener reads the credentials once, on its own accepted connection,
// before the connection reaches gRPC or the session layer (docs/rules.md,
// "Peer credentials").
#ifndef BLOCKSWAP_DAEMON_SESSION_PEER_H_
#define BLOCKSWAP_DAEMON_SESSION_PEER_H_

#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "shared/base/status.h"
#include "shared/base/unique_fd.h"

// Linux 6.5 added SO_PEERPIDFD; older headers lack the number.
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

namespace blockswap::daemon {

// The connecting process's identity when it called connect().
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;              // primary group
  std::vector<gid_t> groups;  // supplementary groups
  bool groups_known = false;  // false when the kernel cannot report them (SO_PEERGROUPS)
};

// One accepted connection, as the registry and the session layer see it.
// Copyable: copies share the pidfd.
struct Peer {
  uint64_t connection_id = 0;  // unique for the daemon's lifetime, never 0
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups
  // Whether the access policy admits this peer. A denied gRPC connection is
  // still served, so that every call on it can say why it is refused.
  bool allowed = false;
  std::string denial;  // AccessPolicy::Check's message when !allowed
  // Refers to the peer's process (not merely its pid, which can be reused):
  // readable once the process has exited. Never null for a registered peer.
  std::shared_ptr<UniqueFd> pidfd;

  // OK, or PERMISSION_DENIED with `denial`.
  absl::Status CheckAllowed() const {
    return allowed ? absl::OkStatus() : absl::PermissionDeniedError(denial);
  }
};

// SO_PEERCRED, and the supplementary groups from SO_PEERGROUPS (Linux 4.13):
// unlike /proc/<pid>/status they are the groups at connect() and cannot
// belong to a different process that reused the pid. `groups_known` is false
// when the kernel lacks SO_PEERGROUPS; the caller then reads /proc
// (ReadSupplementaryGroups in access_policy.h).
inline absl::StatusOr<PeerCredentials> ReadPeerCredentials(const UniqueFd& socket) {
  ucred cred{};
  socklen_t length = sizeof(cred);
  if (::getsockopt(socket.get(), SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) {
    return ErrnoStatus(errno, "reading the peer's credentials (SO_PEERCRED)");
  }
  PeerCredentials credentials{cred.pid, cred.uid, cred.gid, {}, false};
  // NGROUPS_MAX is 65536; start small and grow to what the kernel asks for.
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 3; ++attempt) {
    length = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(socket.get(), SOL_SOCKET, SO_PEERGROUPS, groups.data(), &length) == 0) {
      groups.resize(length / sizeof(gid_t));
      credentials.groups = std::move(groups);
      credentials.groups_known = true;
      return credentials;
    }
    if (errno == ERANGE) {
      groups.resize(length / sizeof(gid_t));
      continue;
    }
    if (errno == ENOPROTOOPT) return credentials;
    return ErrnoStatus(errno, "reading the peer's groups (SO_PEERGROUPS)");
  }
  return absl::InternalError("reading the peer's groups (SO_PEERGROUPS): the list kept growing");
}

// A pidfd for the peer's process: SO_PEERPIDFD (Linux 6.5) names the very
// process that connected; older kernels fall back to pidfd_open(pid), which
// is right unless the peer exited and its pid was reused in between (then the
// session watches the wrong process; nothing else is granted by it).
inline absl::StatusOr<UniqueFd> OpenPeerPidfd(const UniqueFd& socket, pid_t pid) {
  int pidfd = -1;
  socklen_t length = sizeof(pidfd);
  if (::getsockopt(socket.get(), SOL_SOCKET, SO_PEERPIDFD, &pidfd, &length) == 0) {
    return UniqueFd(pidfd);  // pidfds are always created close-on-exec
  }
  // Only a kernel without SO_PEERPIDFD falls back; any other error (the peer
  // has already exited, ...) means there is no process to serve.
  if (errno != ENOPROTOOPT) {
    return ErrnoStatus(errno,
                       absl::StrCat("getting a pidfd for peer pid ", pid, " (SO_PEERPIDFD)"));
  }
  if (pid <= 0) {
    return absl::FailedPreconditionError(
        "the peer's pid is not visible in blockswapd's pid namespace, so its process cannot "
        "be watched");
  }
  // pidfds are always close-on-exec.
  int opened = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (opened < 0) return ErrnoStatus(errno, absl::StrCat("pidfd_open of peer pid ", pid));
  return UniqueFd(opened);
}

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SESSION_PEER_H_
