// Which socket a client talks to: the one rule every binary and binding uses
// (the C ABI's bs_connect, so the torch layer, Python and the demos, and
// blockswapctl). First an explicit path (a --socket flag, BlockSwapConfig's
// socket), then $BLOCKSWAP_SOCKET, then the system daemon's socket.
//
// When neither is configured and the system socket does not answer
// (SocketAnswers), the client library attaches to a private per-user daemon
// instead, starting it when needed (client/core/private_daemon.h):
// SocketSource::kPrivateDaemon. A configured socket never leads there.
#ifndef BLOCKSWAP_CLIENT_CORE_SOCKET_PATH_H_
#define BLOCKSWAP_CLIENT_CORE_SOCKET_PATH_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace blockswap::client {

inline constexpr char kDefaultSocketPath[] = "/run/blockswap/blockswapd.sock";

enum class SocketSource {
  kExplicit,       // given by the caller (a flag or a config field)
  kEnvironment,    // $BLOCKSWAP_SOCKET
  kSystemDefault,  // kDefaultSocketPath
  kPrivateDaemon,  // the per-user daemon (client/core/private_daemon.h)
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

// Whether a daemon accepts connections at `path` now: true when a connect()
// succeeds, false when nobody listens there (no such file, or a stale socket
// that refuses), and an error for anything else (PERMISSION_DENIED when this
// user may not reach it), which is never a reason to look elsewhere.
absl::StatusOr<bool> SocketAnswers(const std::string& path);

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_SOCKET_PATH_H_
