#include "daemon/side_channel.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "shared/fd_passing.h"
#include "shared/status.h"

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

  iovec iov{&header, sizeof(header)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  // MSG_DONTWAIT: a client that stops reading must cost the session a
  // failed reply, never a daemon thread. MSG_NOSIGNAL: a client that went
  // away is an error status, not SIGPIPE.
  ssize_t sent;
  do {
    sent = ::sendmsg(socket.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) {
    int error = errno;
    switch (error) {
      case EAGAIN:
        return absl::ResourceExhaustedError(
            absl::StrCat("side channel of ", DescribePeer(socket), " is full (batch ", batch,
                         " not sent: the client is not receiving its descriptors)"));
      case ETOOMANYREFS:
        return absl::ResourceExhaustedError(absl::StrCat("side channel of ", DescribePeer(socket),
                                                         ": too many descriptors in "
                                                         "flight (batch ",
                                                         batch, " not sent)"));
      case EPIPE:
      case ECONNRESET:
      case ENOTCONN:
        return absl::UnavailableError(absl::StrCat("side channel of ", DescribePeer(socket),
                                                   " is closed (batch ", batch, " not sent)"));
      default:
        return ErrnoStatus(
            error, absl::StrCat("sending descriptor batch ", batch, " to ", DescribePeer(socket)));
    }
  }
  // A unix stream socket queues a 16-byte message whole or not at all; a short
  // send would leave the stream misaligned for good.
  if (static_cast<size_t>(sent) != sizeof(header)) {
    return absl::DataLossError(absl::StrCat("short send of descriptor batch ", batch, " to ",
                                            DescribePeer(socket), ": ", sent, " of ",
                                            sizeof(header), " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace blockswap::daemon
