#include "daemon/session/process_watcher.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace blockswap::daemon {
namespace {

// Only turns a hang into a failure; never a measure of speed.
constexpr absl::Duration kHangGuard = absl::Seconds(10);

// A child process that lives until Exit (or its destruction), and its pidfd.
class Child {
 public:
  Child() {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[1]);
      char byte;
      (void)::read(fds[0], &byte, 1);  // returns once the parent closes its end
      ::_exit(0);
    }
    ::close(fds[0]);
    release_ = UniqueFd(fds[1]);
  }
  ~Child() {
    Exit();
    ::waitpid(pid_, nullptr, 0);
  }
  UniqueFd Pidfd() const { return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0))); }
  void Exit() { release_.Reset(); }

 private:
  pid_t pid_ = -1;
  UniqueFd release_;
};

// The keys reported, in order.
class Reports {
 public:
  void Add(uint64_t key) {
    absl::MutexLock lock(&mu_);
    keys_.push_back(key);
  }
  // The keys once `count` have come (fewer after kHangGuard).
  std::vector<uint64_t> Await(size_t count) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return keys_.size() >= count; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), kHangGuard);
    return keys_;
  }

 private:
  absl::Mutex mu_;
  std::vector<uint64_t> keys_ ABSL_GUARDED_BY(mu_);
};

TEST(ProcessWatcher, ReportsAProcessThatExitsUnderItsKeyOnceAndForgetsIt) {
  Reports reports;
  ProcessWatcher watcher([&](uint64_t key) { reports.Add(key); });
  Child child;
  ASSERT_TRUE(watcher.Watch(7, child.Pidfd()).ok());
  EXPECT_EQ(watcher.watched(), 1u);
  child.Exit();
  EXPECT_EQ(reports.Await(1), std::vector<uint64_t>{7});
  EXPECT_EQ(watcher.watched(), 0u);
  // A pidfd stays readable: a second report of 7 would come before 8's.
  Child second;
  ASSERT_TRUE(watcher.Watch(8, second.Pidfd()).ok());
  second.Exit();
  EXPECT_EQ(reports.Await(2), (std::vector<uint64_t>{7, 8}));
}

TEST(ProcessWatcher, ReportsNothingOfAProcessUnwatchedBeforeItExits) {
  Reports reports;
  ProcessWatcher watcher([&](uint64_t key) { reports.Add(key); });
  Child unwatched;
  Child watched;
  ASSERT_TRUE(watcher.Watch(1, unwatched.Pidfd()).ok());
  ASSERT_TRUE(watcher.Watch(2, watched.Pidfd()).ok());
  watcher.Unwatch(1);
  watcher.Unwatch(99);  // never watched: nothing happens
  unwatched.Exit();
  watched.Exit();
  EXPECT_EQ(reports.Await(1), std::vector<uint64_t>{2});
  EXPECT_EQ(watcher.watched(), 0u);
}

TEST(ProcessWatcher, TheReportMayWatchAndUnwatchWithoutDeadlock) {
  Reports reports;
  Child next;
  ProcessWatcher* self = nullptr;
  ProcessWatcher watcher([&](uint64_t key) {
    self->Unwatch(key);
    if (key == 1) EXPECT_TRUE(self->Watch(2, next.Pidfd()).ok());
    reports.Add(key);
  });
  self = &watcher;
  Child first;
  ASSERT_TRUE(watcher.Watch(1, first.Pidfd()).ok());
  first.Exit();
  ASSERT_EQ(reports.Await(1).size(), 1u);
  next.Exit();
  EXPECT_EQ(reports.Await(2), (std::vector<uint64_t>{1, 2}));
}

TEST(ProcessWatcher, RefusesTheReservedKeyAndABadDescriptor) {
  ProcessWatcher watcher([](uint64_t) {});
  Child child;
  absl::Status reserved = watcher.Watch(ProcessWatcher::kStopKey, child.Pidfd());
  EXPECT_EQ(reserved.code(), absl::StatusCode::kInvalidArgument) << reserved;
  absl::Status bad = watcher.Watch(3, UniqueFd());
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(watcher.watched(), 0u);
}

TEST(ProcessWatcher, StopsWhileProcessesAreStillWatched) {
  Child child;
  {
    ProcessWatcher watcher([](uint64_t) { ADD_FAILURE() << "no process exited"; });
    ASSERT_TRUE(watcher.Watch(1, child.Pidfd()).ok());
  }
  child.Exit();
}

}  // namespace
}  // namespace blockswap::daemon
