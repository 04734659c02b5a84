#include "client/core/side_channel_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "shared/os/fd_passing.h"
#include "shared/protocol/side_channel_wire.h"
#include "shared/base/status.h"

namespace blockswap::client {
namespace {

absl::Status DeadlineError(uint64_t batch, absl::Duration timeout) {
  return absl::DeadlineExceededError(absl::StrCat("descriptor batch ", batch,
                                                  " did not arrive from blockswapd within ",
                                                  absl::FormatDuration(timeout)));
}

}  // namespace

absl::StatusOr<SideChannelClient> SideChannelClient::Connect(absl::string_view socket_path,
                                                             absl::string_view token) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::string hello, EncodeSideChannelHello(token));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket path \"", socket_path, "\" is ", socket_path.size(),
                     " bytes; a unix socket path must be 1..", sizeof(address.sun_path) - 1));
  }
  std::memcpy(address.sun_path, socket_path.data(), socket_path.size());

  // Blocking: Receive polls with its deadline before every read, and the
  // daemon writes each message whole.
  UniqueFd socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!socket) return ErrnoStatus(errno, "creating the descriptor channel's socket");
  int rc;
  do {
    rc = ::connect(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    return ErrnoStatus(
        errno, absl::StrCat("connecting the descriptor channel to blockswapd at ", socket_path));
  }
  size_t sent = 0;
  while (sent < hello.size()) {
    ssize_t n = ::send(socket.get(), hello.data() + sent, hello.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "sending the descriptor channel's hello to blockswapd");
    sent += static_cast<size_t>(n);
  }
  auto state = std::make_unique<State>();
  state->socket = std::move(socket);
  return SideChannelClient(std::move(state));
}

absl::Status SideChannelClient::AwaitAccepted(absl::Duration timeout) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::vector<UniqueFd> fds,
                             Receive(kSideChannelAcceptedBatch, timeout));
  if (!fds.empty()) return absl::DataLossError("the side channel's acceptance carried descriptors");
  return absl::OkStatus();
}

absl::StatusOr<SideChannelClient::Batch> SideChannelClient::ReadBatch(const UniqueFd& socket,
                                                                      absl::Time deadline) {
  while (true) {
    pollfd pfd{socket.get(), POLLIN, 0};
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("");
    int ms = static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))));
    int rc = ::poll(&pfd, 1, ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return ErrnoStatus(errno, "waiting on the descriptor channel");
    if (rc == 0) continue;  // the loop re-checks the deadline
    break;
  }
  // Exactly one header: a stream socket would glue a following message's
  // bytes onto a short read, but never reads past one that carries
  // descriptors, so each header arrives with its own descriptors only.
  auto message = ReceiveExactWithFds(socket, sizeof(FdBatchHeader));
  if (!message.ok()) {
    if (message.status().code() == absl::StatusCode::kUnavailable) {
      // A clean close says nothing more; a reset names its errno.
      absl::string_view detail = message.status().message();
      return absl::UnavailableError(
          detail == "peer closed the descriptor channel"
              ? std::string("blockswapd closed the descriptor channel")
              : absl::StrCat("blockswapd closed the descriptor channel: ", detail));
    }
    return Annotate(message.status(), "reading the descriptor channel");
  }
  FdBatchHeader header;
  std::memcpy(&header, message->payload.data(), sizeof(header));
  if (std::memcmp(header.magic, kFdBatchMagic, sizeof(header.magic)) != 0) {
    return absl::DataLossError(
        absl::StrCat("descriptor channel message starts with \"",
                     absl::CHexEscape(absl::string_view(header.magic, sizeof(header.magic))),
                     "\" instead of \"BSFB\""));
  }
  if (header.fd_count != message->fds.size()) {
    return absl::DataLossError(absl::StrCat("descriptor batch ", header.batch, " announced ",
                                            header.fd_count, " descriptors but ",
                                            message->fds.size(), " arrived"));
  }
  return Batch{header.batch, std::move(message->fds)};
}

absl::StatusOr<std::vector<UniqueFd>> SideChannelClient::Receive(uint64_t batch,
                                                                 absl::Duration timeout) {
  State& state = *state_;
  absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&state.mu);
  while (true) {
    if (auto it = state.kept.find(batch); it != state.kept.end()) {
      std::vector<UniqueFd> fds = std::move(it->second);
      state.kept.erase(it);
      return fds;
    }
    if (!state.failure.ok()) return state.failure;
    if (state.reading) {
      // Another thread is reading; it wakes us whenever it keeps a batch or
      // stops reading (then one of us takes over).
      if (state.changed.WaitWithDeadline(&state.mu, deadline) && !state.kept.contains(batch)) {
        return DeadlineError(batch, timeout);
      }
      continue;
    }
    state.reading = true;
    state.mu.Unlock();
    absl::StatusOr<Batch> read = ReadBatch(state.socket, deadline);
    state.mu.Lock();
    state.reading = false;
    state.changed.SignalAll();
    if (read.ok()) {
      if (state.kept.contains(read->batch)) {
        state.failure = absl::DataLossError(
            absl::StrCat("descriptor batch ", read->batch, " arrived twice from blockswapd"));
        return state.failure;
      }
      state.kept.emplace(read->batch, std::move(read->fds));
      continue;
    }
    if (read.status().code() == absl::StatusCode::kDeadlineExceeded) {
      return DeadlineError(batch, timeout);
    }
    state.failure = read.status();
    return state.failure;
  }
}

absl::Status SideChannelClient::SendFileOffer(uint64_t offer, const UniqueFd& file) {
  FileOfferHeader header{};
  std::memcpy(header.magic, kFileOfferMagic, sizeof(header.magic));
  header.fd_count = 1;
  header.offer = offer;
  absl::MutexLock lock(&state_->send_mu);
  return SendWithFds(state_->socket,
                     absl::string_view(reinterpret_cast<const char*>(&header), sizeof(header)),
                     {file.get()});
}

}  // namespace blockswap::client
