// Passing file descriptors between processes over a unix socket (SCM_RIGHTS).
#ifndef BLOCKSWAP_SHARED_OS_FD_PASSING_H_
#define BLOCKSWAP_SHARED_OS_FD_PASSING_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "shared/base/unique_fd.h"

namespace blockswap {

// At most this many descriptors travel in one message.
inline constexpr size_t kMaxFdsPerMessage = 250;

enum class SendMode {
  kBlocking,
  // Never waits: a full socket is RESOURCE_EXHAUSTED (a peer that stops
  // reading must not hold up the sender).
  kNonBlocking,
};

// Sends `payload` (at least 1 byte, at most 64 KiB) and `fds` as one message
// on a SOCK_SEQPACKET (or SOCK_STREAM) unix socket, never raising SIGPIPE (a
// closed peer is UNAVAILABLE). The caller keeps its descriptors; the receiver
// gets its own copies. A short send is DATA_LOSS: on a stream socket the
// message boundaries are lost for good.
absl::Status SendWithFds(const UniqueFd& socket, absl::string_view payload,
                         absl::Span<const int> fds, SendMode mode = SendMode::kBlocking);

struct ReceivedMessage {
  std::string payload;
  std::vector<UniqueFd> fds;
};

// Receives one message sent by SendWithFds. A closed peer is UNAVAILABLE; a
// message whose descriptors were truncated (MSG_CTRUNC) is an error and the
// descriptors that did arrive are closed.
absl::StatusOr<ReceivedMessage> ReceiveWithFds(const UniqueFd& socket);

// Receives exactly `bytes` bytes (1..64 KiB) from a SOCK_STREAM unix socket,
// with the descriptors that came with them, and never reads a byte further.
// On a stream socket the kernel glues a message onto the bytes before it, but
// it never reads past a message that carries descriptors, so when every
// message is sent by one sendmsg of exactly `bytes` bytes, each call receives
// one message and only its descriptors. Blocks (on a blocking socket) until
// all the bytes are there. A peer that closed first is UNAVAILABLE when
// nothing arrived and DATA_LOSS when part did; truncated descriptors are
// DATA_LOSS (the ones that did arrive are closed).
absl::StatusOr<ReceivedMessage> ReceiveExactWithFds(const UniqueFd& socket, size_t bytes);

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_OS_FD_PASSING_H_
