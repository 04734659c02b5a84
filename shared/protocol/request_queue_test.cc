// The request ring of the load fast path (request_queue.h) and the doorbell
// beside it (doorbell.h), in one process: both control blocks as plain
// memory, the indices started wherever a test needs them.
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "shared/os/doorbell.h"
#include "shared/protocol/request_queue.h"

namespace blockswap {
namespace {

class RequestQueueTest : public ::testing::Test {
 protected:
  // Both indices at `start`, as after `start` requests taken.
  void StartAt(uint32_t start) {
    client_->request_tail.store(start);
    daemon_->request_head.store(start);
    reader_ = std::make_unique<RequestQueueReader>(*client_, *daemon_);
  }

  std::unique_ptr<ClientControlBlock> client_ = std::make_unique<ClientControlBlock>();
  std::unique_ptr<DaemonControlBlock> daemon_ = std::make_unique<DaemonControlBlock>();
  RequestQueueWriter writer_{*client_, *daemon_};
  std::unique_ptr<RequestQueueReader> reader_;
};

TEST_F(RequestQueueTest, EntriesArriveInOrderAcrossTheWrapOfTheIndices) {
  StartAt(UINT32_MAX - 2);
  for (uint32_t i = 0; i < 7; ++i) ASSERT_TRUE(writer_.Push({i, i + 1, 3, 10 + i}).ok());
  EXPECT_EQ(client_->request_tail.load(), 4u);  // wrapped
  ASSERT_TRUE(reader_->HasRequests());
  std::vector<RequestValues> got;
  ASSERT_TRUE(reader_->Take(got).ok());
  ASSERT_EQ(got.size(), 7u);
  for (uint32_t i = 0; i < 7; ++i) {
    EXPECT_EQ(got[i].slot, i);
    EXPECT_EQ(got[i].generation, i + 1);
    EXPECT_EQ(got[i].model_handle, 3u);
    EXPECT_EQ(got[i].block, 10 + i);
  }
  EXPECT_EQ(daemon_->request_head.load(), 4u) << "the head is published for the writer";
  EXPECT_FALSE(reader_->HasRequests());
  got.clear();
  ASSERT_TRUE(reader_->Take(got).ok());
  EXPECT_TRUE(got.empty());
}

TEST_F(RequestQueueTest, TheWriterNeverOverwritesEntriesTheDaemonHasNotTaken) {
  StartAt(UINT32_MAX - 10);
  for (uint32_t i = 0; i < kRequestRingCapacity; ++i) ASSERT_TRUE(writer_.Push({0, i, 1, 0}).ok());
  absl::Status full = writer_.Push({0, 99, 1, 0});
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_TRUE(absl::StrContains(full.message(), "64 requests not yet taken")) << full;
  std::vector<RequestValues> got;
  ASSERT_TRUE(reader_->Take(got).ok());
  ASSERT_EQ(got.size(), kRequestRingCapacity);
  EXPECT_EQ(got.front().generation, 0u);
  EXPECT_EQ(got.back().generation, kRequestRingCapacity - 1);
  EXPECT_TRUE(writer_.Push({0, 99, 1, 0}).ok()) << "room again once taken";
}

TEST_F(RequestQueueTest, ATailFarPastTheHeadIsAPreciseErrorAndTakesNothing) {
  StartAt(UINT32_MAX - 1);
  // What only a misbehaving client writes: 65 entries in a 64-entry ring.
  client_->request_tail.store(UINT32_MAX - 1 + kRequestRingCapacity + 1);
  std::vector<RequestValues> got;
  absl::Status overrun = reader_->Take(got);
  EXPECT_TRUE(absl::IsFailedPrecondition(overrun)) << overrun;
  EXPECT_TRUE(absl::StrContains(overrun.message(),
                                "is 65 entries past head 4294967294 (the ring has 64 entries)"))
      << overrun;
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(daemon_->request_head.load(), UINT32_MAX - 1);
}

TEST_F(RequestQueueTest, AFullRingIsNotAnOverrun) {
  StartAt(7);
  client_->request_tail.store(7 + kRequestRingCapacity);
  std::vector<RequestValues> got;
  ASSERT_TRUE(reader_->Take(got).ok());
  EXPECT_EQ(got.size(), kRequestRingCapacity);
}

TEST_F(RequestQueueTest, ATailBehindTheHeadIsAnOverrun) {
  // A client that moves its tail backwards: 2^32 - 1 entries "published".
  StartAt(100);
  client_->request_tail.store(99);
  std::vector<RequestValues> got;
  EXPECT_TRUE(absl::IsFailedPrecondition(reader_->Take(got)));
  EXPECT_TRUE(got.empty());
}

TEST(DoorbellTest, ARingFromAnImportedDoorbellWakesTheSleeper) {
  std::unique_ptr<Doorbell> daemon = Doorbell::Create("test-doorbell").value();
  std::unique_ptr<Doorbell> client = Doorbell::Import(daemon->Export().value()).value();
  absl::Notification woke;
  std::thread sleeper([&] {
    uint32_t seen = daemon->PrepareToSleep();
    // Sleeps until rung (the timeout is only a backstop for a broken bell).
    daemon->Sleep(seen, absl::Seconds(60));
    woke.Notify();
  });
  // Rings until the sleeper has woken: a ring before its PrepareToSleep
  // would be consumed by its read of the bell, not by a wake.
  const absl::Time start = absl::Now();
  while (!woke.WaitForNotificationWithTimeout(absl::Milliseconds(20))) client->Ring();
  sleeper.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30)) << "woken by the timeout, not the bell";
}

TEST(DoorbellTest, ARingBetweenPrepareAndSleepIsNotLost) {
  std::unique_ptr<Doorbell> daemon = Doorbell::Create("test-doorbell").value();
  std::unique_ptr<Doorbell> client = Doorbell::Import(daemon->Export().value()).value();
  uint32_t seen = daemon->PrepareToSleep();
  client->Ring();  // work published after the sleeper looked for it
  const absl::Time start = absl::Now();
  daemon->Sleep(seen, absl::Seconds(60));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30)) << "the ring was lost";
}

TEST(DoorbellTest, AnImportedDoorbellDoesNotArriveWithoutItsDescriptors) {
  EXPECT_TRUE(absl::IsInvalidArgument(Doorbell::Import({}).status()));
}

}  // namespace
}  // namespace blockswap
