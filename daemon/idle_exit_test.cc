#include "daemon/idle_exit.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

#include <string>

namespace blockswap::daemon {
namespace {

class IdleExitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/blockswap-idle-exit.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    lock_path_ = dir_ + "/start.lock";
  }
  void TearDown() override {
    ::unlink(lock_path_.c_str());
    ::rmdir(dir_.c_str());
  }

  std::string dir_;
  std::string lock_path_;
  const absl::Time start_ = absl::Now();
};

TEST_F(IdleExitTest, ZeroNeverExits) {
  auto idle = IdleExit::Create(absl::ZeroDuration(), lock_path_);
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_FALSE(idle->enabled());
  EXPECT_FALSE(idle->ShouldExit([] { return size_t{0}; }, start_ + absl::Hours(100)));
}

TEST_F(IdleExitTest, ExitsOnceNoSessionWasAttachedForTheTimeout) {
  auto idle = IdleExit::Create(absl::Seconds(10), lock_path_);
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_FALSE(idle->ShouldExit([] { return size_t{0}; }, start_ + absl::Seconds(5)));
  EXPECT_TRUE(idle->ShouldExit([] { return size_t{0}; }, start_ + absl::Seconds(11)));
}

TEST_F(IdleExitTest, TheIdleTimeStartsWhenTheLastSessionEnds) {
  auto idle = IdleExit::Create(absl::Seconds(10), lock_path_);
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_FALSE(idle->ShouldExit([] { return size_t{2}; }, start_ + absl::Seconds(20)));
  EXPECT_FALSE(idle->ShouldExit([] { return size_t{0}; }, start_ + absl::Seconds(21)));
  EXPECT_FALSE(idle->ShouldExit([] { return size_t{0}; }, start_ + absl::Seconds(30)));
  EXPECT_TRUE(idle->ShouldExit([] { return size_t{0}; }, start_ + absl::Seconds(32)));
}

TEST_F(IdleExitTest, AClientHoldingTheStartLockDefersTheExit) {
  auto idle = IdleExit::Create(absl::Seconds(1), lock_path_);
  ASSERT_TRUE(idle.ok()) << idle.status();
  int client = ::open(lock_path_.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(client, 0);
  ASSERT_EQ(::flock(client, LOCK_SH), 0);  // attaching
  EXPECT_FALSE(idle->ShouldExit([] { return size_t{0}; }, start_ + absl::Seconds(5)));
  ASSERT_EQ(::flock(client, LOCK_UN), 0);
  EXPECT_TRUE(idle->ShouldExit([] { return size_t{0}; }, start_ + absl::Seconds(6)));
  // Exiting, the daemon keeps the lock: no client starts another daemon yet.
  EXPECT_NE(::flock(client, LOCK_SH | LOCK_NB), 0);
  ::close(client);
}

TEST_F(IdleExitTest, ASessionThatAttachedBeforeTheLockWasTakenKeepsTheDaemon) {
  auto idle = IdleExit::Create(absl::Seconds(1), lock_path_);
  ASSERT_TRUE(idle.ok()) << idle.status();
  int counted = 0;
  // 0 before the lock is taken, 1 after: a client attached in between.
  auto sessions = [&counted] { return size_t(counted++ == 0 ? 0 : 1); };
  EXPECT_FALSE(idle->ShouldExit(sessions, start_ + absl::Seconds(5)));
  int client = ::open(lock_path_.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(client, 0);
  EXPECT_EQ(::flock(client, LOCK_SH | LOCK_NB), 0) << "the lock was given back";
  ::close(client);
}

TEST_F(IdleExitTest, AnUnopenableLockFailsAtStart) {
  auto idle = IdleExit::Create(absl::Seconds(1), dir_ + "/missing/start.lock");
  EXPECT_FALSE(idle.ok());
  EXPECT_NE(idle.status().message().find("idle-exit lock"), std::string::npos) << idle.status();
}

}  // namespace
}  // namespace blockswap::daemon
