#include "daemon/session/side_channel.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "shared/os/fd_passing.h"
#include "shared/base/status.h"

namespace blockswap::daemon {
namespace {

// "pid N" for messages; only computed on the error path.
std::string DescribePeer(const UniqueFd& socket) {
  ucred cred{};
  socklen_t length = sizeof(cred);
  if (::getsockopt(socket.get(), SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) {
    return absl::StrCat("fd ", socket.get());
  }
  return absl::StrCat("pid ", cred.pid);
}

}  // namespace

absl::Status SendFdBatch(const UniqueFd& socket, uint64_t batch, absl::Span<const int> fds) {
  if (fds.size() > kMaxFdsPerMessage) {
    return absl::InvalidArgumentError(absl::StrCat("batch ", batch, " has ", fds.size(),
                                                   " descriptors (at most ", kMaxFdsPerMessage,
                                                   " travel in one message)"));
  }
  FdBatchHeader header{};
  std::memcpy(header.magic, kFdBatchMagic, sizeof(header.magic));
  header.fd_count = static_cast<uint32_t>(fds.size());
  header.batch = batch;

  // Non-blocking: a client that stops reading must cost its session a failed
  // reply, never a daemon thread.
  absl::Status sent =
      SendWithFds(socket, absl::string_view(reinterpret_cast<const char*>(&header), sizeof(header)),
                  fds, SendMode::kNonBlocking);
  if (absl::IsResourceExhausted(sent)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("side channel of ", DescribePeer(socket), " is full (batch ", batch,
                     " not sent: the client is not receiving its descriptors; ", sent.message(),
                     ")"));
  }
  if (absl::IsUnavailable(sent)) {
    return absl::UnavailableError(absl::StrCat("side channel of ", DescribePeer(socket),
                                               " is closed (batch ", batch, " not sent)"));
  }
  BLOCKSWAP_RETURN_IF_ERROR(Annotate(
      sent, absl::StrCat("sending descriptor batch ", batch, " to ", DescribePeer(socket))));
  return absl::OkStatus();
}

}  // namespace blockswap::daemon
