// StallMeter on the host backend: results are collected without blocking,
// in ticket order, each told to the ring's trace callback once.
#include "client/core/stall_meter.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "shared/base/monotonic_clock.h"

namespace blockswap::client {
namespace {

class StallMeterTest : public ::testing::Test {
 protected:
  StallMeterTest()
      : backend_(OpenHostBackend({})),
        device_(*backend_->devices()[0]),
        recorder_(device_.CreateStream().value()),
        compute_(device_.CreateStream().value()),
        event_(device_.CreateEvent().value()),
        meter_(device_, [this](const MeasuredStall& stall) { traced_.push_back(stall.ticket); }) {}

  // One wait of the compute stream on the event's latest record, timed.
  uint64_t TimedWait(uint32_t slot) {
    WaitTimer* timer = meter_.Acquire().value();
    EXPECT_TRUE(compute_->WaitTimed(*event_, *timer).ok());
    return meter_.Issued(slot, /*generation=*/slot + 1);
  }

  std::unique_ptr<Backend> backend_;
  Device& device_;
  std::unique_ptr<Stream> recorder_;
  std::unique_ptr<Stream> compute_;
  std::unique_ptr<Event> event_;
  std::vector<uint64_t> traced_;
  StallMeter meter_;
};

TEST_F(StallMeterTest, CollectsWithoutBlockingOnlyWhatTheStreamHasPassed) {
  absl::Notification release;
  ASSERT_TRUE(recorder_->LaunchHostFunc([&] { release.WaitForNotification(); }).ok());
  ASSERT_TRUE(recorder_->Record(*event_).ok());
  const uint64_t first = TimedWait(0);
  const uint64_t second = TimedWait(1);
  EXPECT_EQ(second, first + 1);

  ASSERT_TRUE(meter_.Collect(/*wait_for_all=*/false).ok());
  EXPECT_TRUE(meter_.TakeCollected().empty()) << "the stream is still at its first wait";
  EXPECT_TRUE(traced_.empty());

  // When the stream's worker reaches its wait is up to the scheduler (a
  // loaded machine measured 3.9 ms idle after a 20 ms sleep): what must hold
  // is that the idle span ends no earlier than the release.
  absl::SleepFor(absl::Milliseconds(20));
  const uint64_t released_ns = MonotonicNanos();
  release.Notify();
  ASSERT_TRUE(meter_.Collect(/*wait_for_all=*/true).ok());
  std::vector<MeasuredStall> collected = meter_.TakeCollected();
  ASSERT_EQ(collected.size(), 2u);
  EXPECT_EQ(collected[0].ticket, first);
  EXPECT_EQ(collected[0].slot, 0u);
  EXPECT_EQ(collected[0].generation, 1u);
  const WaitIdle& idle = collected[0].idle;
  EXPECT_GE(idle.began_ns + absl::ToInt64Nanoseconds(idle.idle), released_ns)
      << "it idled until the release";
  EXPECT_EQ(collected[1].ticket, second);
  EXPECT_EQ(traced_, (std::vector<uint64_t>{first, second}));
  EXPECT_TRUE(meter_.TakeCollected().empty()) << "each result is taken once";
}

TEST_F(StallMeterTest, ATimerThatTimedNothingGetsNoTicket) {
  ASSERT_TRUE(meter_.Acquire().ok());
  meter_.Unused();
  const uint64_t next = meter_.next_ticket();
  ASSERT_TRUE(recorder_->Record(*event_).ok());
  EXPECT_EQ(TimedWait(0), next);
  ASSERT_TRUE(meter_.Collect(/*wait_for_all=*/true).ok());
  EXPECT_EQ(meter_.TakeCollected().size(), 1u);
}

}  // namespace
}  // namespace blockswap::client
