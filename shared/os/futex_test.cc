#include "shared/os/futex.h"

#include <atomic>
#include <iostream>

#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "shared/os/shared_memory.h"
#include "tests/support/child_process.h"

namespace blockswap {
namespace {

constexpr int kChildWordFd = 3;
struct Words {
  std::atomic<uint32_t> value;
  std::atomic<uint32_t> waiter_ready;
};

// Child: maps the words READ-ONLY (as a client maps the daemon's half), says
// it is about to wait, then waits ONCE on `value` == 0 and reports the result
// as its exit code.
int FutexWaiter(const std::vector<std::string>& args) {
  int64_t timeout_ms = 5000;
  if (!args.empty()) (void)absl::SimpleAtoi(args[0], &timeout_ms);
  auto shm = SharedMemory::Adopt(UniqueFd(kChildWordFd), 4096);
  if (!shm.ok()) return 2;
  auto mapping = shm->Map(Access::kReadOnly);
  if (!mapping.ok()) return 2;
  auto* words = static_cast<const Words*>(mapping->data());
  // The parent sets waiter_ready right after spawning us.
  while (words->waiter_ready.load() == 0) absl::SleepFor(absl::Milliseconds(1));
  switch (FutexWait(&words->value, 0, absl::Milliseconds(timeout_ms))) {
    case FutexWaitResult::kWoken:
      return words->value.load() == 1 ? 0 : 5;
    case FutexWaitResult::kValueChanged:
      return 3;
    case FutexWaitResult::kTimedOut:
      return 4;
    case FutexWaitResult::kInterrupted:
      return 6;
  }
  return 7;
}
BLOCKSWAP_CHILD_ROLE("futex-waiter", FutexWaiter);

struct SharedWords {
  SharedMemory shm;
  Mapping mapping;
  Words* words() { return static_cast<Words*>(mapping.data()); }
};
SharedWords MakeWords() {
  auto shm = SharedMemory::Create("futex-test", 4096);
  EXPECT_TRUE(shm.ok());
  auto mapping = shm->Map(Access::kReadWrite);
  EXPECT_TRUE(mapping.ok());
  return {std::move(*shm), std::move(*mapping)};
}

TEST(Futex, WakesAWaiterInAnotherProcess) {
  // A wake sent before the child entered its wait shows as kValueChanged
  // (exit 3) and proves nothing: try again then, a few times.
  int code = 3;
  for (int attempt = 0; attempt < 3 && code == 3; ++attempt) {
    SharedWords shared = MakeWords();
    auto child = testing::ChildProcess::Spawn(
        "futex-waiter", {.args = {"5000"}, .inherit = {{shared.shm.fd().get(), kChildWordFd}}});
    ASSERT_TRUE(child.ok()) << child.status();
    shared.words()->waiter_ready.store(1);
    absl::SleepFor(absl::Milliseconds(300));  // time for the child to enter the wait
    shared.words()->value.store(1, std::memory_order_release);
    FutexWakeAll(&shared.words()->value);
    auto exited = child->Wait(absl::Seconds(10));
    ASSERT_TRUE(exited.ok()) << exited.status();
    code = *exited;
  }
  EXPECT_EQ(code, 0) << "4: never woken (a private futex?), 3: never caught waiting";
}

TEST(Futex, WaiterInAnotherProcessTimesOutWithoutAWake) {
  SharedWords shared = MakeWords();
  auto child = testing::ChildProcess::Spawn(
      "futex-waiter", {.args = {"200"}, .inherit = {{shared.shm.fd().get(), kChildWordFd}}});
  ASSERT_TRUE(child.ok());
  shared.words()->waiter_ready.store(1);
  auto code = child->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 4);
}

TEST(Futex, WaitTimesOutAfterTheTimeout) {
  std::atomic<uint32_t> word{0};
  absl::Time start = absl::Now();
  EXPECT_EQ(FutexWait(&word, 0, absl::Milliseconds(100)), FutexWaitResult::kTimedOut);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(95));
}

TEST(Futex, WaitReturnsAtOnceWhenTheValueDiffers) {
  std::atomic<uint32_t> word{7};
  EXPECT_EQ(FutexWait(&word, 0, absl::Seconds(10)), FutexWaitResult::kValueChanged);
}

TEST(FutexAwait, ReturnsDeadlineExceededWhenTheConditionNeverHolds) {
  std::atomic<uint32_t> word{0};
  absl::Status status = FutexAwait(&word, absl::Milliseconds(100), [] { return false; },
                                   absl::Milliseconds(10));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(FutexAwait, PropagatesTheConditionsError) {
  std::atomic<uint32_t> word{0};
  absl::Status status = FutexAwait(&word, absl::Seconds(10), []() -> absl::StatusOr<bool> {
    return absl::UnavailableError("daemon gone");
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
}

TEST(SeqAtLeast, ComparesAcrossWrapAround) {
  EXPECT_TRUE(SeqAtLeast(5, 5));
  EXPECT_TRUE(SeqAtLeast(6, 5));
  EXPECT_FALSE(SeqAtLeast(4, 5));
  EXPECT_TRUE(SeqAtLeast(2, UINT32_MAX - 1));
  EXPECT_FALSE(SeqAtLeast(UINT32_MAX - 1, 2));
}

}  // namespace
}  // namespace blockswap
