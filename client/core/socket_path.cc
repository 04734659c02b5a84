#include "client/core/socket_path.h"

#include <cstdlib>

namespace blockswap::client {

ResolvedSocket ResolveSocket(absl::string_view explicit_path) {
  if (!explicit_path.empty()) {
    return {.path = std::string(explicit_path), .source = SocketSource::kExplicit};
  }
  const char* from_environment = std::getenv(kSocketEnvironmentVariable);
  if (from_environment != nullptr && from_environment[0] != '\0') {
    return {.path = from_environment, .source = SocketSource::kEnvironment};
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
  }
  return "an unknown source";
}

}  // namespace blockswap::client
