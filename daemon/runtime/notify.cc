#include "daemon/runtime/notify.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "shared/base/env_settings.h"
#include "shared/base/status.h"
#include "shared/base/unique_fd.h"

namespace blockswap::daemon {

absl::Status NotifyTo(absl::string_view socket_path, absl::string_view state) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.size() < 2 || socket_path.size() >= sizeof(address.sun_path) ||
      (socket_path[0] != '/' && socket_path[0] != '@')) {
    return absl::InvalidArgumentError(
        absl::StrCat("NOTIFY_SOCKET '", socket_path, "' is neither a path nor @abstract"));
  }
  std::memcpy(address.sun_path, socket_path.data(), socket_path.size());
  if (socket_path[0] == '@') address.sun_path[0] = '\0';
  const socklen_t length =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_path.size());
  UniqueFd socket(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!socket) return ErrnoStatus(errno, "creating the notification socket");
  ssize_t sent = ::sendto(socket.get(), state.data(), state.size(), MSG_NOSIGNAL,
                          reinterpret_cast<const sockaddr*>(&address), length);
  if (sent < 0) return ErrnoStatus(errno, absl::StrCat("notifying systemd at ", socket_path));
  if (static_cast<size_t>(sent) != state.size()) {
    return absl::InternalError(absl::StrCat("short notification to ", socket_path));
  }
  return absl::OkStatus();
}

absl::Status NotifySystemd(absl::string_view state) {
  const std::optional<std::string> socket_path = EnvValue(EnvSetting::kNotifySocket);
  if (!socket_path.has_value()) return absl::OkStatus();
  return NotifyTo(*socket_path, state);
}

}  // namespace blockswap::daemon
