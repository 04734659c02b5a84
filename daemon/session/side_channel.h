// The daemon's half of the descriptor side channel (docs/rules.md,
// "Descriptors over a side channel"; the wire format is
// shared/protocol/side_channel_wire.h).
//
// A client opens the side channel by connecting to the daemon's socket and
// sending a hello with its session token; the listener reads it, checks the
// peer against the access policy and hands the socket to the session layer
// through SideChannelAcceptor. The session then sends descriptors with
// SendFdBatch, next to the gRPC reply that names them.
#ifndef BLOCKSWAP_DAEMON_SESSION_SIDE_CHANNEL_H_
#define BLOCKSWAP_DAEMON_SESSION_SIDE_CHANNEL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "daemon/session/peer.h"
#include "shared/protocol/side_channel_wire.h"
#include "shared/base/unique_fd.h"

namespace blockswap::daemon {

// Implemented by the session layer. Called on the listener's thread, so it
// must not block (take a lock briefly, never wait on a peer), and it must not
// call back into the Listener.
class SideChannelAcceptor {
 public:
  virtual ~SideChannelAcceptor() = default;

  // `token` is the hello's session token (32 printable ASCII bytes), `peer`
  // the connection's kernel credentials (always an allowed peer), `socket`
  // the non-blocking, close-on-exec connection. On success the acceptor keeps
  // the socket (typically in the session whose token it is, after checking
  // that the session belongs to the same pid and uid). On error it must let
  // the socket go (the client then sees the channel closed); the listener
  // reports the error.
  virtual absl::Status AcceptSideChannel(absl::string_view token, const Peer& peer,
                                         UniqueFd socket) = 0;
};

// Sends `fds` (at most kMaxFdsPerMessage) as batch `batch`: one sendmsg of a
// FdBatchHeader with the descriptors attached, never blocking. The caller
// keeps its descriptors. A full socket is RESOURCE_EXHAUSTED ("side channel
// of pid N is full"), a closed one UNAVAILABLE; after any error other than
// INVALID_ARGUMENT the channel should be dropped.
absl::Status SendFdBatch(const UniqueFd& socket, uint64_t batch, absl::Span<const int> fds);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SESSION_SIDE_CHANNEL_H_
