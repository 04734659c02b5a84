// The client's half of the descriptor side channel against a fake daemon: a
// listening unix socket that reads the hello and writes batches in the wire
// format of shared/protocol/side_channel_wire.h. The daemon's half (the listener that
// takes the hello, SendFdBatch) is tested in daemon/server/listener_test.cc.
#include "client/core/side_channel_client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "shared/os/fd_passing.h"
#include "shared/os/shared_memory.h"
#include "shared/protocol/side_channel_wire.h"
#include "tests/support/memfd_text.h"

namespace blockswap::client {
namespace {

using ::blockswap::testing::ContentOf;
using ::blockswap::testing::MemfdWith;

constexpr char kGoodToken[] = "0123456789abcdef0123456789abcdef";
constexpr absl::Duration kPatience = absl::Seconds(5);

TEST(SideChannelClient, RefusesAMalformedToken) {
  EXPECT_EQ(SideChannelClient::Connect("/nonexistent.sock", "short").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SideChannelClient, MissingDaemonNamesThePath) {
  auto channel = SideChannelClient::Connect("/nonexistent/blockswapd.sock", kGoodToken);
  EXPECT_FALSE(channel.ok());
  EXPECT_NE(channel.status().message().find("/nonexistent/blockswapd.sock"),
            absl::string_view::npos)
      << channel.status();
}

// A fake daemon that accepts one side channel and then sends raw bytes.
class FakeDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/blockswap-fake-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    std::string path = dir_ + "/s";
    listening_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(::bind(listening_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(::listen(listening_.get(), 4), 0);
    auto channel = SideChannelClient::Connect(path, kGoodToken);
    ASSERT_TRUE(channel.ok()) << channel.status();
    channel_.emplace(*std::move(channel));
    daemon_side_ = UniqueFd(::accept4(listening_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    ASSERT_TRUE(daemon_side_.valid());
    char hello[sizeof(SideChannelHello)];
    ASSERT_EQ(::recv(daemon_side_.get(), hello, sizeof(hello), MSG_WAITALL),
              static_cast<ssize_t>(sizeof(hello)));
    auto token = DecodeSideChannelHello(absl::string_view(hello, sizeof(hello)));
    ASSERT_TRUE(token.ok()) << token.status();
    EXPECT_EQ(*token, kGoodToken);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // One message of the wire: a header (which may lie) with `fds` attached.
  void SendHeader(const char* magic, uint32_t count, uint64_t batch, absl::Span<const int> fds) {
    FdBatchHeader header{};
    std::memcpy(header.magic, magic, 4);
    header.fd_count = count;
    header.batch = batch;
    ASSERT_TRUE(SendWithFds(daemon_side_,
                            absl::string_view(reinterpret_cast<char*>(&header), sizeof(header)),
                            fds)
                    .ok());
  }

  // A well-formed batch, as blockswapd's SendFdBatch writes it.
  void SendBatch(uint64_t batch, absl::Span<const int> fds) {
    SendHeader(kFdBatchMagic, static_cast<uint32_t>(fds.size()), batch, fds);
  }

  std::string dir_;
  UniqueFd listening_;
  UniqueFd daemon_side_;
  std::optional<SideChannelClient> channel_;
};

// --- batches ---------------------------------------------------------------------

TEST_F(FakeDaemonTest, BatchesCarryDescriptorsWithTheirContent) {
  SharedMemory one = MemfdWith("one"), two = MemfdWith("two");
  int fds[] = {one.fd().get(), two.fd().get()};
  ASSERT_NO_FATAL_FAILURE(SendBatch(7, fds));
  auto received = channel_->Receive(7, kPatience);
  ASSERT_TRUE(received.ok()) << received.status();
  ASSERT_EQ(received->size(), 2u);
  EXPECT_EQ(ContentOf(std::move((*received)[0])), "one");
  EXPECT_EQ(ContentOf(std::move((*received)[1])), "two");
  ASSERT_NO_FATAL_FAILURE(SendBatch(8, {}));
  auto empty = channel_->Receive(8, kPatience);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
}

TEST_F(FakeDaemonTest, OutOfOrderBatchesAreKeptForWhoeverAsks) {
  SharedMemory one = MemfdWith("one"), two = MemfdWith("two");
  int fd_two[] = {two.fd().get()};
  int fd_one[] = {one.fd().get()};
  ASSERT_NO_FATAL_FAILURE(SendBatch(2, fd_two));
  ASSERT_NO_FATAL_FAILURE(SendBatch(1, fd_one));
  auto first = channel_->Receive(1, kPatience);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 1u);
  EXPECT_EQ(ContentOf(std::move((*first)[0])), "one");
  auto second = channel_->Receive(2, kPatience);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->size(), 1u);
  EXPECT_EQ(ContentOf(std::move((*second)[0])), "two");
}

TEST_F(FakeDaemonTest, ThreadsWaitingForDifferentBatchesEachGetTheirs) {
  constexpr int kThreads = 8;
  std::vector<SharedMemory> memories;
  for (int i = 0; i < kThreads; ++i) memories.push_back(MemfdWith(absl::StrCat("batch ", i)));
  std::vector<std::string> contents(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto fds = channel_->Receive(100 + i, kPatience);
      contents[i] =
          fds.ok() && fds->size() == 1 ? ContentOf(std::move((*fds)[0])) : fds.status().ToString();
    });
  }
  absl::SleepFor(absl::Milliseconds(50));  // let them all wait first
  for (int i = kThreads - 1; i >= 0; --i) {
    int fd[] = {memories[i].fd().get()};
    ASSERT_NO_FATAL_FAILURE(SendBatch(100 + i, fd));
  }
  for (auto& thread : threads) thread.join();
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(contents[i], absl::StrCat("batch ", i));
}

TEST_F(FakeDaemonTest, ReceiveTimesOutNamingTheBatch) {
  auto received = channel_->Receive(99, absl::Milliseconds(100));
  EXPECT_EQ(received.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(received.status().message().find("batch 99"), absl::string_view::npos)
      << received.status();
}

// What the client sees when blockswapd refuses its token: the daemon closes
// the channel without a word. (That the listener does close it, and logs why,
// is ListenerTest.BadTokenClosesTheChannel.)
TEST_F(FakeDaemonTest, BadTokenClosesTheChannel) {
  daemon_side_.Reset();
  auto received = channel_->Receive(1, kPatience);
  EXPECT_EQ(received.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(received.status().message(), "blockswapd closed the descriptor channel");
  EXPECT_EQ(channel_->Receive(2, kPatience).status().code(), absl::StatusCode::kUnavailable)
      << "a closed channel stays closed";
}

// --- malformed messages ------------------------------------------------------------

TEST_F(FakeDaemonTest, WrongMagicIsDataLoss) {
  SendHeader("XXXX", 0, 1, {});
  auto received = channel_->Receive(1, kPatience);
  EXPECT_EQ(received.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(received.status().message().find("instead of \"BSFB\""), absl::string_view::npos)
      << received.status();
  EXPECT_EQ(channel_->Receive(2, kPatience).status().code(), absl::StatusCode::kDataLoss)
      << "a corrupt channel stays failed";
}

TEST_F(FakeDaemonTest, DescriptorCountMismatchIsDataLoss) {
  SharedMemory memory = MemfdWith("x");
  int fd[] = {memory.fd().get()};
  SendHeader("BSFB", 2, 5, fd);
  auto received = channel_->Receive(5, kPatience);
  EXPECT_EQ(received.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(received.status().message(),
            "descriptor batch 5 announced 2 descriptors but 1 arrived");
}

TEST_F(FakeDaemonTest, ABatchSentTwiceIsDataLoss) {
  SendHeader("BSFB", 0, 3, {});
  SendHeader("BSFB", 0, 3, {});
  auto received = channel_->Receive(4, kPatience);
  EXPECT_EQ(received.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(received.status().message().find("arrived twice"), absl::string_view::npos);
  EXPECT_TRUE(channel_->Receive(3, kPatience).ok()) << "batches already kept can still be taken";
}

}  // namespace
}  // namespace blockswap::client
