#include "tests/gpu/probe_channel.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "shared/base/status.h"
#include "shared/os/fd_passing.h"

namespace blockswap::probe {
namespace {

// The phase of a step's end messages.
constexpr uint32_t kEnd = 99;

}  // namespace

std::string Who(Role role) {
  const char* name = role == Role::kA ? "A" : role == Role::kB ? "B" : "A2";
  return absl::StrCat(name, " (pid ", ::getpid(), ", uid ", ::getuid(), ")");
}

absl::StatusOr<UniqueFd> Received::TakeFd(absl::string_view what) {
  if (fds.size() != 1) {
    return absl::DataLossError(
        absl::StrCat(what, "'s descriptor did not arrive (", fds.size(), " descriptors)"));
  }
  return std::move(fds[0]);
}

absl::Status Channel::Send(uint32_t step, uint32_t phase, const void* data, size_t size, int fd) {
  Wire wire;
  wire.step = step;
  wire.phase = phase;
  if (size > 0) std::memcpy(wire.data, data, size);
  return SendWire(wire, fd);
}

absl::StatusOr<Received> Channel::Await(uint32_t step, uint32_t phase) {
  const absl::Time deadline = absl::Now() + kPeerTimeout;
  while (true) {
    if (peer_end_.has_value() && peer_end_->step == step) {
      if (phase == kEnd) return Received{*peer_end_, {}};
      return absl::AbortedError("gave up: the other process ended this step first");
    }
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    pollfd pfd{socket_.get(), POLLIN, 0};
    const int ready = left <= 0 ? 0 : ::poll(&pfd, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      return absl::DeadlineExceededError(absl::StrCat("no message from the other process within ",
                                                      absl::FormatDuration(kPeerTimeout), " (step ",
                                                      step, ", phase ", phase, ")"));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(ReceivedMessage message, ReceiveWithFds(socket_));
    if (message.payload.size() != sizeof(Wire)) {
      return absl::DataLossError(absl::StrCat("a message of ", message.payload.size(),
                                              " bytes from the other process (", sizeof(Wire),
                                              " expected)"));
    }
    Received received;
    std::memcpy(&received.wire, message.payload.data(), sizeof(Wire));
    received.fds = std::move(message.fds);
    // Messages of an earlier step, sent before its sender gave up, are stale.
    if (received.wire.step != step) continue;
    if (received.wire.phase == kEnd) {
      peer_end_ = received.wire;
      if (phase == kEnd) return received;
      continue;
    }
    if (received.wire.phase == phase) return received;
  }
}

Channel::PeerEnd Channel::Finish(uint32_t step, const absl::Status& mine, const std::string& info) {
  Wire wire;
  wire.step = step;
  wire.phase = kEnd;
  wire.code = static_cast<uint32_t>(mine.code());
  const std::string detail = mine.ok() ? info : absl::StrCat(Who(role_), ": ", mine.message());
  absl::SNPrintF(wire.detail, sizeof(wire.detail), "%s", detail);
  if (absl::Status sent = SendWire(wire, -1); !sent.ok()) {
    return {absl::UnavailableError(absl::StrCat("the other process is gone: ", sent.message())),
            ""};
  }
  absl::StatusOr<Received> end = Await(step, kEnd);
  peer_end_.reset();
  if (!end.ok()) return {end.status(), ""};
  if (end->wire.code == 0) return {absl::OkStatus(), end->wire.detail};
  return {absl::Status(static_cast<absl::StatusCode>(end->wire.code), end->wire.detail), ""};
}

absl::Status Channel::SendWire(const Wire& wire, int fd) {
  std::vector<int> fds;
  if (fd >= 0) fds.push_back(fd);
  return SendWithFds(socket_, absl::string_view(reinterpret_cast<const char*>(&wire), sizeof(wire)),
                     fds);
}

void Conclude(Report& report, absl::string_view name, const absl::Status& mine,
              const std::vector<Channel::PeerEnd>& peers, absl::string_view passed) {
  std::vector<absl::Status> all;
  all.push_back(mine.ok()
                    ? mine
                    : absl::Status(mine.code(), absl::StrCat(Who(Role::kA), ": ", mine.message())));
  for (const Channel::PeerEnd& peer : peers) all.push_back(peer.status);
  for (const absl::Status& status : all) {
    if (absl::IsUnimplemented(status)) {
      report.Skip(name, status.message());
      return;
    }
  }
  for (const absl::Status& status : all) {
    if (!status.ok() && !absl::IsAborted(status)) {
      report.Fail(name, status.message());
      return;
    }
  }
  for (const absl::Status& status : all) {
    if (!status.ok()) {
      report.Fail(name, status.message());
      return;
    }
  }
  report.Pass(name, passed);
}

}  // namespace blockswap::probe
