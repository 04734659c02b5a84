#include "daemon/server/socket_file.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

std::string DirectoryOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// An existing socket file: stale (nobody accepts on it) is removed, live is
// refused.
absl::Status RemoveStaleSocket(const std::string& path, const sockaddr_un& address) {
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!probe) return ErrnoStatus(errno, "creating a socket to probe " + path);
  int rc = ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  // EAGAIN: a listener whose backlog is full, which is still a listener.
  if (rc == 0 || errno == EAGAIN || errno == EINPROGRESS) {
    return absl::FailedPreconditionError(
        absl::StrCat("another blockswapd is listening on ", path,
                     "; stop it first or give this one another socket path"));
  }
  if (errno == ENOENT) return absl::OkStatus();  // removed meanwhile
  if (errno != ECONNREFUSED) {
    return ErrnoStatus(errno, absl::StrCat("probing the existing socket ", path));
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("removing the stale socket ", path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<sockaddr_un> UnixSocketAddress(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path \"", path, "\" is ", path.size(),
                                                   " bytes; a unix socket path must be 1..",
                                                   sizeof(address.sun_path) - 1));
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

absl::Status ClearSocketPath(const std::string& path, const sockaddr_un& address) {
  std::string directory = DirectoryOf(path);
  struct stat info;
  if (::stat(directory.c_str(), &info) != 0) {
    return Annotate(ErrnoStatus(errno, directory),
                    absl::StrCat("the directory of socket path ", path, " must exist"));
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(directory, " (the directory of socket path ", path, ") is not a directory"));
  }
  if (::lstat(path.c_str(), &info) == 0) {
    if (!S_ISSOCK(info.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " exists and is not a socket; refusing to replace it"));
    }
    BLOCKSWAP_RETURN_IF_ERROR(RemoveStaleSocket(path, address));
  } else if (errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("checking socket path ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<BoundSocket> BindSocket(const std::string& path, const sockaddr_un& address) {
  BoundSocket bound;
  bound.socket = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!bound.socket) return ErrnoStatus(errno, "creating the daemon's socket");
  if (::bind(bound.socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) !=
      0) {
    if (errno == EADDRINUSE) {
      return absl::FailedPreconditionError(absl::StrCat(
          path,
          " was created by someone else while this blockswapd was replacing it (another "
          "daemon starting at the same time?)"));
    }
    return ErrnoStatus(errno, absl::StrCat("binding the daemon's socket to ", path));
  }
  if (::stat(path.c_str(), &bound.file) != 0) {
    int error = errno;
    ::unlink(path.c_str());
    return ErrnoStatus(error, absl::StrCat("checking the new socket ", path));
  }
  return bound;
}

absl::StatusOr<gid_t> SetSocketAccess(const std::string& path, std::optional<gid_t> group,
                                      gid_t file_group, mode_t mode) {
  if (group.has_value()) {
    if (::chown(path.c_str(), static_cast<uid_t>(-1), *group) != 0) {
      return ErrnoStatus(errno, absl::StrCat("giving ", path, " to group ", *group));
    }
    file_group = *group;
  }
  // Until chmod the file has the umask's mode; a peer that connects in that
  // window still meets the access policy, which is the real gate.
  if (::chmod(path.c_str(), mode) != 0) {
    char text[16];
    std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode));
    return ErrnoStatus(errno, absl::StrCat("setting mode ", text, " on ", path));
  }
  return file_group;
}

}  // namespace blockswap::daemon
