#include "shared/os/fd_passing.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

namespace blockswap {
namespace {
constexpr size_t kMaxPayload = 64 * 1024;

// Moves every SCM_RIGHTS descriptor of `msg` into `fds`.
void CollectDescriptors(msghdr& msg, std::vector<UniqueFd>& fds) {
  for (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg != nullptr; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
    if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
      fds.emplace_back(fd);
    }
  }
}
}  // namespace

absl::Status SendWithFds(const UniqueFd& socket, absl::string_view payload,
                         absl::Span<const int> fds, SendMode mode) {
  if (payload.empty() || payload.size() > kMaxPayload) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload of ", payload.size(), " bytes (must be 1..", kMaxPayload, ")"));
  }
  if (fds.size() > kMaxFdsPerMessage) {
    return absl::InvalidArgumentError(
        absl::StrCat(fds.size(), " descriptors in one message (at most ", kMaxFdsPerMessage, ")"));
  }
  iovec iov{const_cast<char*>(payload.data()), payload.size()};
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
  ssize_t sent;
  do {
    sent = ::sendmsg(socket.get(), &msg,
                     MSG_NOSIGNAL | (mode == SendMode::kNonBlocking ? MSG_DONTWAIT : 0));
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return ErrnoStatus(errno, "sending descriptors");
  if (static_cast<size_t>(sent) != payload.size()) {
    return absl::DataLossError(
        absl::StrCat("short send of descriptors: ", sent, " of ", payload.size(), " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ReceivedMessage> ReceiveWithFds(const UniqueFd& socket) {
  std::string payload(kMaxPayload, '\0');
  iovec iov{payload.data(), payload.size()};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  ssize_t got;
  do {
    got = ::recvmsg(socket.get(), &msg, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return ErrnoStatus(errno, "receiving descriptors");
  ReceivedMessage received;
  CollectDescriptors(msg, received.fds);
  if (got == 0) return absl::UnavailableError("peer closed the descriptor channel");
  if (msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) {
    return absl::DataLossError("descriptor message truncated");
  }
  payload.resize(static_cast<size_t>(got));
  received.payload = std::move(payload);
  return received;
}

absl::StatusOr<ReceivedMessage> ReceiveExactWithFds(const UniqueFd& socket, size_t bytes) {
  if (bytes == 0 || bytes > kMaxPayload) {
    return absl::InvalidArgumentError(
        absl::StrCat("exact receive of ", bytes, " bytes (must be 1..", kMaxPayload, ")"));
  }
  ReceivedMessage received;
  received.payload.assign(bytes, '\0');
  std::vector<char> control(CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage));
  size_t total = 0;
  while (total < bytes) {
    iovec iov{received.payload.data() + total, bytes - total};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    ssize_t got = ::recvmsg(socket.get(), &msg, MSG_CMSG_CLOEXEC);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return ErrnoStatus(errno, absl::StrCat("receiving descriptors (", total, " of ", bytes,
                                             " bytes received)"));
    }
    CollectDescriptors(msg, received.fds);
    if (msg.msg_flags & MSG_CTRUNC) return absl::DataLossError("descriptor message truncated");
    if (got == 0) {
      if (total == 0) return absl::UnavailableError("peer closed the descriptor channel");
      return absl::DataLossError(absl::StrCat("peer closed the descriptor channel after ", total,
                                              " of ", bytes, " bytes of a message"));
    }
    total += static_cast<size_t>(got);
  }
  return received;
}

}  // namespace blockswap
