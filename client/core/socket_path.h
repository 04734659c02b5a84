// Which socket a client talks to: the one rule every binary and binding uses
// (the C ABI's bs_connect, so the torch layer, Python and the demos, and
// blockswapctl). First an explicit path (a --socket flag, BlockSwapConfig's
// socket), then $BLOCKSWAP_SOCKET, then the system daemon's socket.
//
// A later source (DESIGN §8's per-user embedded daemon, started when no socket
// is configured and none answers) becomes another SocketSource here, so the
// callers need not change.
#ifndef BLOCKSWAP_CLIENT_CORE_SOCKET_PATH_H_
#define BLOCKSWAP_CLIENT_CORE_SOCKET_PATH_H_

#include <string>

#include "absl/strings/string_view.h"

namespace blockswap::client {

inline constexpr char kDefaultSocketPath[] = "/run/blockswap/blockswapd.sock";
inline constexpr char kSocketEnvironmentVariable[] = "BLOCKSWAP_SOCKET";

enum class SocketSource {
  kExplicit,       // given by the caller (a flag or a config field)
  kEnvironment,    // $BLOCKSWAP_SOCKET
  kSystemDefault,  // kDefaultSocketPath
};

struct ResolvedSocket {
  std::string path;
  SocketSource source = SocketSource::kSystemDefault;
};

// `explicit_path` empty means "not given". An empty $BLOCKSWAP_SOCKET counts
// as unset (`BLOCKSWAP_SOCKET= cmd` is how a shell unsets it for one command).
ResolvedSocket ResolveSocket(absl::string_view explicit_path);

// "--socket", "$BLOCKSWAP_SOCKET" or "the default": for messages that say
// where a path came from.
absl::string_view SocketSourceName(SocketSource source);

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_SOCKET_PATH_H_
