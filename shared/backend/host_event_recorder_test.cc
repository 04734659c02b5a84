// A host-backend wait on a record whose recorder died (the daemon killed
// mid-copy) must end — the caller learns that what the wait guarded is not
// guaranteed — instead of blocking for ever: UNAVAILABLE from a wait on the
// calling thread; on an asynchronous stream, a sticky failure that skips
// the work queued behind the wait.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "shared/backend/backend.h"
#include "shared/os/fd_passing.h"
#include "tests/support/child_process.h"

namespace blockswap {
namespace {

constexpr int kChildSocket = 3;

// Creates an event, issues a record that its stream never reaches (the
// stream is held by a host function), hands the event to the parent and
// waits to be killed — a daemon dying between issuing a copy and its record.
int RunHalfRecorder(const std::vector<std::string>&) {
  auto backend = OpenHostBackend({.device_count = 1});
  Device& device = *backend->devices()[0];
  auto event = device.CreateInterprocessEvent();
  auto stream = device.CreateStream();
  if (!event.ok() || !stream.ok()) return 2;
  auto never = std::make_shared<absl::Notification>();
  (void)(*stream)->LaunchHostFunc([never] { never->WaitForNotification(); });
  if (!(*stream)->Record(**event).ok()) return 2;
  auto exported = (*event)->Export();
  if (!exported.ok()) return 2;
  UniqueFd socket(kChildSocket);
  if (!SendWithFds(socket, exported->blob, {exported->fd.get()}).ok()) return 2;
  while (true) absl::SleepFor(absl::Seconds(1));
}
BLOCKSWAP_CHILD_ROLE("half-recorder", RunHalfRecorder);

class DeadRecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int pair[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    UniqueFd mine(pair[0]), theirs(pair[1]);
    auto child = testing::ChildProcess::Spawn("half-recorder",
                                              {.inherit = {{theirs.get(), kChildSocket}}});
    ASSERT_TRUE(child.ok()) << child.status();
    child_ = std::make_unique<testing::ChildProcess>(*std::move(child));
    theirs.Reset();
    auto message = ReceiveWithFds(mine);
    ASSERT_TRUE(message.ok()) << message.status();
    ASSERT_EQ(message->fds.size(), 1u);
    auto event = device().ImportEvent({message->payload, std::move(message->fds[0])});
    ASSERT_TRUE(event.ok()) << event.status();
    event_ = *std::move(event);
  }

  Device& device() { return *backend_->devices()[0]; }

  std::unique_ptr<Backend> backend_ = OpenHostBackend({.device_count = 1});
  std::unique_ptr<testing::ChildProcess> child_;
  std::unique_ptr<Event> event_;
};

TEST_F(DeadRecorderTest, WaitOnTheCallingThreadFailsUnavailableOnceTheRecorderDies) {
  auto stream = device().WrapStream(nullptr, absl::Seconds(30));
  ASSERT_TRUE(stream.ok());
  absl::Status waited;
  absl::Notification done;
  std::thread waiter([&] {
    waited = (*stream)->Wait(*event_);
    done.Notify();
  });
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(200)))
      << "the record is not complete: the wait must block while its recorder lives";
  child_->Kill(SIGKILL);
  // The recorder's death ends the wait, not the stream's 30 s deadline: it
  // returns within a sixth of that deadline.
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  waiter.join();
  EXPECT_TRUE(absl::IsUnavailable(waited)) << waited;
  EXPECT_NE(waited.message().find("exited before completing it"), std::string::npos) << waited;
}

TEST_F(DeadRecorderTest, AsynchronousStreamFailsAndSkipsTheWorkBehindTheWait) {
  auto stream = device().CreateStream();
  ASSERT_TRUE(stream.ok());
  std::atomic<bool> ran{false};
  ASSERT_TRUE((*stream)->Wait(*event_).ok());
  ASSERT_TRUE((*stream)->LaunchHostFunc([&] { ran = true; }).ok());
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(ran) << "the work behind an incomplete record ran";
  child_->Kill(SIGKILL);
  absl::Status synchronized = (*stream)->Synchronize();
  EXPECT_TRUE(absl::IsUnavailable(synchronized)) << synchronized;
  EXPECT_FALSE(ran) << "the work guarded by the dead recorder's record must not run";
  EXPECT_TRUE(absl::IsUnavailable((*stream)->LaunchHostFunc([] {})))
      << "the failure is sticky, as a CUDA stream error is";
}

// Using an imported event after its creator died is undefined on CUDA: on
// the host every later record, wait and query of it fails UNAVAILABLE (an
// error, not a reported breach: a client cannot close the race with a daemon
// that dies).
TEST_F(DeadRecorderTest, RecordingWaitingOrQueryingAnEventOfADeadProcessFailsUnavailable) {
  child_->Kill(SIGKILL);
  ASSERT_TRUE(child_->Wait(absl::Seconds(10)).ok());
  auto stream = device().CreateStream();
  auto caller = device().WrapStream(nullptr, absl::Seconds(30));
  ASSERT_TRUE(stream.ok() && caller.ok());
  absl::Status recorded = (*stream)->Record(*event_);
  EXPECT_TRUE(absl::IsUnavailable(recorded)) << recorded;
  EXPECT_NE(recorded.message().find("which has exited"), std::string::npos) << recorded;
  EXPECT_TRUE(absl::IsUnavailable((*caller)->Record(*event_)));
  EXPECT_TRUE(absl::IsUnavailable((*stream)->Wait(*event_)));
  EXPECT_TRUE(absl::IsUnavailable((*caller)->Wait(*event_)));
  EXPECT_TRUE(absl::IsUnavailable(event_->Query().status()));
}

}  // namespace
}  // namespace blockswap
