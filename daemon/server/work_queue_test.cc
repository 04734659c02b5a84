#include "daemon/server/work_queue.h"

#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace blockswap::daemon {
namespace {

constexpr absl::Duration kPatience = absl::Seconds(10);

// What items started, in order ("uid:index"), for the tests to await.
class StartLog {
 public:
  void Add(uid_t uid, int index) {
    absl::MutexLock lock(&mu_);
    started_.push_back(absl::StrCat(uid, ":", index));
  }
  // The log once it has `count` entries (or as it is after kPatience).
  std::vector<std::string> Await(size_t count) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return started_.size() >= count; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), kPatience);
    return started_;
  }
  // The item that started n-th (from 0), once it has; "none" if none did.
  std::string Nth(size_t n) {
    std::vector<std::string> started = Await(n + 1);
    return started.size() > n ? started[n] : "none";
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> started_ ABSL_GUARDED_BY(mu_);
};

// Posts an item of `uid` that logs its start, then waits for `release`.
void PostHeld(WorkQueue& queue, StartLog& log, uid_t uid, int index, absl::Notification& release) {
  queue.Post(uid, Cancellation(), [&log, &release, uid, index](const Cancellation&) {
    log.Add(uid, index);
    release.WaitForNotificationWithTimeout(kPatience);
  });
}

// Items held until released one by one, on a queue of two threads; every
// item is released, and must have started, by the end of the test.
class WorkQueueFairnessTest : public testing::Test {
 protected:
  void TearDown() override {
    for (absl::Notification& each : release_) {
      if (!each.HasBeenNotified()) each.Notify();
    }
    queue_.reset();
    EXPECT_EQ(log_.Await(release_.size()).size(), release_.size());
  }

  // Posts item `index` of `uid`; it runs until Release(n), n counting posts from 0.
  void Post(uid_t uid, int index) { PostHeld(*queue_, log_, uid, index, release_.emplace_back()); }
  void Release(size_t n) { release_[n].Notify(); }

  StartLog log_;
  std::deque<absl::Notification> release_;  // a deque: waiting items hold references
  std::unique_ptr<WorkQueue> queue_ = std::make_unique<WorkQueue>(2);
};

TEST_F(WorkQueueFairnessTest, AnotherUidsItemWaitsForOneItemOfAUidWithManyQueued) {
  for (int i = 0; i < 10; ++i) Post(1000, i);
  EXPECT_EQ(log_.Await(2).size(), 2u);  // both threads run uid 1000's items
  Post(2000, 0);
  Release(0);
  EXPECT_EQ(log_.Nth(2), "2000:0") << "uid 2000 waited behind uid 1000's queue";
}

// Each uid with work keeps a thread: the thread uid 2000's item frees goes
// to its next item, not to uid 1000, which runs one already (and was served
// longer ago).
TEST_F(WorkQueueFairnessTest, ThreadsAreSharedEquallyBetweenUidsWithWork) {
  Post(1000, 0);
  Post(2000, 0);
  EXPECT_EQ(log_.Await(2).size(), 2u);
  Post(1000, 1);
  Post(2000, 1);
  Release(1);
  EXPECT_EQ(log_.Nth(2), "2000:1") << "uid 1000 took both threads";
}

TEST(WorkQueueTest, UidsTakeTurnsAndEachUidsItemsRunInTheirOrder) {
  StartLog log;
  absl::Notification blocker;
  absl::Notification go;
  go.Notify();
  {
    WorkQueue queue(1);
    PostHeld(queue, log, 1, 0, blocker);
    EXPECT_EQ(log.Await(1).size(), 1u);
    for (int i = 0; i < 3; ++i) {
      PostHeld(queue, log, 1000, i, go);
      PostHeld(queue, log, 2000, i, go);
    }
    PostHeld(queue, log, 1000, 3, go);
    blocker.Notify();
  }
  EXPECT_EQ(log.Await(8), (std::vector<std::string>{"1:0", "1000:0", "2000:0", "1000:1", "2000:1",
                                                    "1000:2", "2000:2", "1000:3"}));
}

TEST(WorkQueueTest, WorkSeesItsCallersCancellation) {
  absl::Notification done;
  absl::Status seen;
  WorkQueue queue(1);
  queue.Post(7, Cancellation([] { return absl::CancelledError("the client left"); }),
             [&](const Cancellation& cancellation) {
               seen = cancellation.Check();
               done.Notify();
             });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kPatience));
  EXPECT_EQ(seen, absl::CancelledError("the client left"));
}

// A stop reaches the running item at its next check and answers the queued
// ones at once: none of them waits for the others' work.
TEST(WorkQueueTest, AStopEndsRunningWorkAndAnswersQueuedWorkAtOnce) {
  std::vector<absl::Status> seen(4);
  absl::Notification running;
  auto queue = std::make_unique<WorkQueue>(1);
  queue->Post(1, Cancellation(), [&](const Cancellation& cancellation) {
    running.Notify();
    // Work that would take minutes, asking between its steps.
    for (absl::Time until = absl::Now() + kPatience; absl::Now() < until;) {
      seen[0] = cancellation.Check();
      if (!seen[0].ok()) return;
      absl::SleepFor(absl::Milliseconds(1));
    }
  });
  for (int i = 1; i < 4; ++i) {
    queue->Post(i % 2 + 1, Cancellation(), [&seen, i](const Cancellation& cancellation) {
      seen[i] = cancellation.Check();
      if (seen[i].ok()) absl::SleepFor(kPatience);  // the work itself
    });
  }
  ASSERT_TRUE(running.WaitForNotificationWithTimeout(kPatience));
  const absl::Time start = absl::Now();
  queue->Stop();
  queue.reset();  // joins once every item has run
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  for (const absl::Status& status : seen) {
    EXPECT_EQ(status, absl::UnavailableError("blockswapd is shutting down"));
  }
}

}  // namespace
}  // namespace blockswap::daemon
