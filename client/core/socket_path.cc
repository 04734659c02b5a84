#include "client/core/socket_path.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "shared/base/env_settings.h"
#include "shared/base/status.h"
#include "shared/base/unique_fd.h"

namespace blockswap::client {

ResolvedSocket ResolveSocket(absl::string_view explicit_path) {
  if (!explicit_path.empty()) {
    return {.path = std::string(explicit_path), .source = SocketSource::kExplicit};
  }
  if (std::optional<std::string> from_environment = EnvValue(EnvSetting::kSocket)) {
    return {.path = *std::move(from_environment), .source = SocketSource::kEnvironment};
  }
  return {.path = kDefaultSocketPath, .source = SocketSource::kSystemDefault};
}

absl::string_view SocketSourceName(SocketSource source) {
  switch (source) {
    case SocketSource::kExplicit:
      return "the explicit path";
    case SocketSource::kEnvironment:
      return "$BLOCKSWAP_SOCKET";
    case SocketSource::kSystemDefault:
      return "the default";
    case SocketSource::kPrivateDaemon:
      return "the private per-user daemon";
  }
  return "an unknown source";
}

absl::StatusOr<bool> SocketAnswers(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path ", path, " is ", path.size(),
                                                   " bytes (at most ", sizeof(address.sun_path) - 1,
                                                   ")"));
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!probe.valid()) return ErrnoStatus(errno, "creating a unix socket");
  if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) {
    return true;
  }
  const int error = errno;
  if (error == ENOENT || error == ECONNREFUSED || error == ENOTDIR) return false;
  if (error == EACCES || error == EPERM) {
    return absl::PermissionDeniedError(
        absl::StrCat("connecting to blockswapd at ", path, ": ", std::strerror(error),
                     " (this user may not use that daemon; ask its administrator to allow "
                     "this user or group)"));
  }
  return ErrnoStatus(error, absl::StrCat("connecting to blockswapd at ", path));
}

}  // namespace blockswap::client
