#include "shared/os/fd_passing.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "shared/os/shared_memory.h"
#include "tests/support/memfd_text.h"

namespace blockswap {
namespace {

using ::blockswap::testing::ContentOf;
using ::blockswap::testing::MemfdWith;

struct SocketPair {
  UniqueFd a, b;
};
SocketPair MakePair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

TEST(FdPassing, DescriptorsArriveInOrderAndReferToTheSameFiles) {
  SocketPair pair = MakePair();
  auto first = SharedMemory::Create("first", 4096);
  auto second = SharedMemory::Create("second", 4096);
  ASSERT_TRUE(first.ok() && second.ok());
  auto map1 = first->Map(Access::kReadWrite);
  auto map2 = second->Map(Access::kReadWrite);
  std::strcpy(static_cast<char*>(map1->data()), "one");
  std::strcpy(static_cast<char*>(map2->data()), "two");

  int fds[] = {first->fd().get(), second->fd().get()};
  ASSERT_TRUE(SendWithFds(pair.a, "payload", fds).ok());
  auto received = ReceiveWithFds(pair.b);
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(received->payload, "payload");
  ASSERT_EQ(received->fds.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    auto shm = SharedMemory::Adopt(std::move(received->fds[i]), 4096);
    ASSERT_TRUE(shm.ok());
    auto mapping = shm->Map(Access::kReadOnly);
    EXPECT_STREQ(static_cast<const char*>(mapping->data()), i == 0 ? "one" : "two");
  }
}

TEST(FdPassing, MessageWithoutDescriptors) {
  SocketPair pair = MakePair();
  ASSERT_TRUE(SendWithFds(pair.a, "x", {}).ok());
  auto received = ReceiveWithFds(pair.b);
  ASSERT_TRUE(received.ok());
  EXPECT_EQ(received->payload, "x");
  EXPECT_TRUE(received->fds.empty());
}

TEST(FdPassing, ClosedPeerIsUnavailable) {
  SocketPair pair = MakePair();
  pair.a.Reset();
  EXPECT_EQ(ReceiveWithFds(pair.b).status().code(), absl::StatusCode::kUnavailable);
}

TEST(FdPassing, RefusesEmptyPayloadAndTooManyDescriptors) {
  SocketPair pair = MakePair();
  EXPECT_EQ(SendWithFds(pair.a, "", {}).code(), absl::StatusCode::kInvalidArgument);
  std::vector<int> many(kMaxFdsPerMessage + 1, pair.a.get());
  EXPECT_EQ(SendWithFds(pair.a, "x", many).code(), absl::StatusCode::kInvalidArgument);
}

// ReceiveExactWithFds, on the property the side channel rests on: over a
// stream socket it never reads past a message that carries descriptors.
TEST(FdPassing, ReceiveExactWithFdsNeverReadsPastAMessageWithDescriptors) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd a(pair[0]), b(pair[1]);
  SharedMemory x = MemfdWith("x"), y = MemfdWith("y");
  int fd_x[] = {x.fd().get()};
  int fd_y[] = {y.fd().get()};
  ASSERT_TRUE(SendWithFds(a, "aaaa", {}).ok());
  ASSERT_TRUE(SendWithFds(a, "bbbb", fd_x).ok());
  ASSERT_TRUE(SendWithFds(a, "cccc", fd_y).ok());
  a.Reset();
  for (auto [payload, content] : {std::pair{"aaaa", ""}, {"bbbb", "x"}, {"cccc", "y"}}) {
    auto message = ReceiveExactWithFds(b, 4);
    ASSERT_TRUE(message.ok()) << message.status();
    EXPECT_EQ(message->payload, payload);
    ASSERT_EQ(message->fds.size(), std::string(content).empty() ? 0u : 1u) << payload;
    if (!message->fds.empty()) {
      EXPECT_EQ(ContentOf(std::move(message->fds[0])), content);
    }
  }
  EXPECT_EQ(ReceiveExactWithFds(b, 4).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace blockswap
