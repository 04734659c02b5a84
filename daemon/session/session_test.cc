#include "daemon/session/session.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <utility>
#include <vector>

#include "daemon/session/client_accounts.h"
#include "shared/os/fd_passing.h"
#include "shared/protocol/side_channel_wire.h"
#include "tests/support/test_peer.h"

namespace blockswap::daemon {
namespace {

constexpr pid_t kPid = 42;
constexpr uid_t kUid = 1000;

Peer ClientPeer() { return ::blockswap::testing::TestPeer(kPid, kUid); }

// A session with a side channel: `client` is the client's end.
struct Connected {
  std::shared_ptr<Session> session = std::make_shared<Session>(1, "token", ClientPeer(), "client");
  UniqueFd client;

  Connected() {
    int pair[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    EXPECT_EQ(::fcntl(pair[0], F_SETFL, O_NONBLOCK), 0);
    absl::MutexLock lock(&session->mu);
    session->side_channel = UniqueFd(pair[0]);
    client = UniqueFd(pair[1]);
  }

  // The next batch on the channel: its number and how many descriptors came.
  std::pair<uint64_t, size_t> Receive() const {
    auto message = ReceiveExactWithFds(client, sizeof(FdBatchHeader));
    EXPECT_TRUE(message.ok()) << message.status();
    if (!message.ok()) return {0, 0};
    FdBatchHeader header;
    std::memcpy(&header, message->payload.data(), sizeof(header));
    return {header.batch, message->fds.size()};
  }
};

TEST(Session, SendFdsNumbersEachBatchAfterTheLast) {
  Connected connected;
  Session& session = *connected.session;
  absl::MutexLock lock(&session.mu);
  EXPECT_EQ(session.SendFds({connected.client.get()}).value(), 1u);
  EXPECT_EQ(session.SendFds({}).value(), 2u);
  EXPECT_EQ(connected.Receive(), (std::pair<uint64_t, size_t>{1, 1}));
  EXPECT_EQ(connected.Receive(), (std::pair<uint64_t, size_t>{2, 0}));
}

TEST(Session, SendingWithoutASideChannelIsAFailedPrecondition) {
  Session session(1, "token", ClientPeer(), "client");
  absl::MutexLock lock(&session.mu);
  absl::StatusOr<uint64_t> sent = session.SendFds({});
  EXPECT_EQ(sent.status().code(), absl::StatusCode::kFailedPrecondition) << sent.status();
}

TEST(Session, AChannelThatFailsToSendIsDroppedButNotForABatchTooLarge) {
  Connected connected;
  Session& session = *connected.session;
  absl::MutexLock lock(&session.mu);
  std::vector<int> too_many(kMaxFdsPerMessage + 1, connected.client.get());
  EXPECT_EQ(session.SendBatch(5, too_many).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(session.side_channel.valid());
  connected.client.Reset();
  EXPECT_FALSE(session.SendFds({}).ok());
  EXPECT_FALSE(session.side_channel.valid());
}

TEST(Session, EndingLetsGoOfWhatItHoldsButAnUploadBeingCommitted) {
  ClientAccounts accounts;
  ClientQuotas quotas;
  Connected connected;
  Session& session = *connected.session;
  {
    absl::MutexLock lock(&session.mu);
    session.charged = *accounts.Reserve(kUid, kPid, {.sessions = 1}, quotas);
    session.uploads[1].committing = true;
    session.uploads[2].charged = *accounts.Reserve(kUid, kPid, {.staging_bytes = 10}, quotas);
    session.file_offers[3] = ParkedFileOffer{};
  }
  ASSERT_EQ(accounts.HeldByProcess(kPid).sessions, 1u);
  session.End(SessionEnd::kDetached);
  absl::MutexLock lock(&session.mu);
  EXPECT_TRUE(session.ended);
  EXPECT_EQ(accounts.HeldByProcess(kPid).sessions, 0u);
  EXPECT_EQ(accounts.HeldByProcess(kPid).staging_bytes, 0u);
  ASSERT_EQ(session.uploads.size(), 1u);
  EXPECT_TRUE(session.uploads.contains(1));
  EXPECT_TRUE(session.file_offers.empty());
  EXPECT_FALSE(session.side_channel.valid());
}

}  // namespace
}  // namespace blockswap::daemon
