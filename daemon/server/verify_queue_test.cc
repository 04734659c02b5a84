#include "daemon/server/verify_queue.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "daemon/store/block_placement.h"

namespace blockswap::daemon {
namespace {

class VerifyQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/dev/shm/blockswap-verify-queue-XXXXXX";
    ASSERT_NE(::mkdtemp(name), nullptr);
    directory_ = name;
    auto store = ModelStore::Open(ModelStoreOptions{directory_ + "/masters"}, nullptr);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(directory_);
  }

  // A one-block model of `floats` zero floats (the size makes the id).
  std::string Register(uint64_t floats) {
    ModelLayout layout;
    layout.blocks.push_back(
        *PackBlock({TensorSpec{.name = "w", .dtype = "F32", .shape = {floats}}}));
    std::vector<std::byte> content(StagingOffsets(layout)->total_bytes);
    auto registered = store_->Register("m", layout, content.data(), content.size());
    EXPECT_TRUE(registered.ok()) << registered.status();
    return registered.ok() ? registered->model->id() : "";
  }

  std::string directory_;
  std::unique_ptr<ModelStore> store_;
};

TEST_F(VerifyQueueTest, CallsForAModelWaitingToBeVerifiedShareOneVerification) {
  const std::string busy = Register(1000);
  const std::string model = Register(2000);
  VerifyQueue queue(*store_, /*max_per_uid=*/0);
  // Holds the queue's thread in the first call's answer, so that the others
  // all arrive while their verification waits.
  absl::Notification release;
  absl::Notification busy_done;
  ASSERT_TRUE(queue
                  .Submit(0, busy,
                          [&](const absl::StatusOr<VerifyResult>&) {
                            release.WaitForNotification();
                            busy_done.Notify();
                          })
                  .ok());
  constexpr int kCalls = 10;
  std::vector<absl::StatusOr<VerifyResult>> results(kCalls, absl::UnknownError("no answer"));
  absl::BlockingCounter answered(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(queue
                    .Submit(static_cast<uid_t>(1000 + i), model,
                            [&, i](const absl::StatusOr<VerifyResult>& r) {
                              results[i] = r;
                              answered.DecrementCount();
                            })
                    .ok());
  }
  release.Notify();
  busy_done.WaitForNotification();
  answered.Wait();
  for (const auto& result : results) {
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->blocks, 1u);
  }
  EXPECT_EQ(queue.verifications(), 2u) << "the ten calls for one model were not merged";
}

TEST_F(VerifyQueueTest, AUidOverItsLimitIsRefusedAtOnceNamingIt) {
  const std::string model = Register(1000);
  VerifyQueue queue(*store_, /*max_per_uid=*/2);
  absl::Notification release;
  absl::BlockingCounter answered(3);
  auto hold = [&](const absl::StatusOr<VerifyResult>&) {
    release.WaitForNotification();
    answered.DecrementCount();
  };
  ASSERT_TRUE(queue.Submit(7, model, hold).ok());
  ASSERT_TRUE(queue.Submit(7, model, hold).ok());
  absl::Status third = queue.Submit(7, model, hold);
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(third.message(),
            "uid 7 already has 2 VerifyModel calls waiting or running (max_verifies_per_uid = 2); "
            "retry when one has answered");
  EXPECT_TRUE(queue.Submit(8, model, hold).ok()) << "another uid is not limited by uid 7";
  release.Notify();
  answered.Wait();
  // One more call through the queue's one thread: when it is answered, the
  // earlier calls have been counted off.
  absl::Notification flushed;
  ASSERT_TRUE(
      queue.Submit(9, model, [&](const absl::StatusOr<VerifyResult>&) { flushed.Notify(); }).ok());
  flushed.WaitForNotification();
  // Answered calls no longer count.
  absl::Notification again;
  EXPECT_TRUE(
      queue.Submit(7, model, [&](const absl::StatusOr<VerifyResult>&) { again.Notify(); }).ok());
  again.WaitForNotification();
}

// A graceful stop: the verification waiting behind the running call's
// answer is answered UNAVAILABLE instead of hashing the model.
TEST_F(VerifyQueueTest, AStopAnswersTheVerificationsNotDoneUnavailable) {
  const std::string busy = Register(1000);
  const std::string model = Register(2000);
  VerifyQueue queue(*store_, /*max_per_uid=*/0);
  absl::Notification release;
  ASSERT_TRUE(
      queue
          .Submit(1, busy,
                  [&](const absl::StatusOr<VerifyResult>&) { release.WaitForNotification(); })
          .ok());
  absl::Notification answered;
  absl::StatusOr<VerifyResult> result = absl::UnknownError("no answer");
  ASSERT_TRUE(queue
                  .Submit(2, model,
                          [&](const absl::StatusOr<VerifyResult>& r) {
                            result = r;
                            answered.Notify();
                          })
                  .ok());
  queue.Stop();
  release.Notify();
  answered.WaitForNotification();
  EXPECT_EQ(result.status(), absl::UnavailableError("blockswapd is shutting down"));
}

}  // namespace
}  // namespace blockswap::daemon
