// The daemon's unix socket file, made in steps, one job each: the path as
// an address, the path made free (a stale socket of a dead daemon removed,
// anything else refused), the socket bound there, and the file's group and
// mode. The Listener (listener.h) runs them in this order and listens.
#ifndef BLOCKSWAP_DAEMON_SERVER_SOCKET_FILE_H_
#define BLOCKSWAP_DAEMON_SERVER_SOCKET_FILE_H_

#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shared/base/unique_fd.h"

namespace blockswap::daemon {

// INVALID_ARGUMENT for a path that is empty or does not fit sun_path.
absl::StatusOr<sockaddr_un> UnixSocketAddress(const std::string& path);

// Checks that the directory of `path` exists, and that nothing is at `path`
// but a stale socket, which it removes: FAILED_PRECONDITION for another
// kind of file or a socket someone listens on.
absl::Status ClearSocketPath(const std::string& path, const sockaddr_un& address);

// A socket bound to its path (the file exists from here on).
struct BoundSocket {
  UniqueFd socket;
  struct stat file {};  // the socket file's identity, as bound
};
// Creates a non-blocking socket and binds it to `address` (`path`). On an
// error after the bind the file is removed.
absl::StatusOr<BoundSocket> BindSocket(const std::string& path, const sockaddr_un& address);

// Gives the socket file `group` (nullopt: the one it has, `file_group`) and
// `mode`; returns its group.
absl::StatusOr<gid_t> SetSocketAccess(const std::string& path, std::optional<gid_t> group,
                                      gid_t file_group, mode_t mode);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SERVER_SOCKET_FILE_H_
