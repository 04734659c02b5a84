#include "tests/bench/release_to_issue.h"

#include <gtest/gtest.h>

#include "shared/protocol/trace_log.h"

namespace blockswap::bench {
namespace {

void AddEvent(v1::TraceDevice& device, TraceKind kind, uint64_t ring, uint32_t slot,
              uint32_t generation, uint64_t time_ns) {
  v1::TraceEvent* event = device.add_events();
  event->set_kind(static_cast<uint32_t>(kind));
  event->set_ring_id(ring);
  event->set_slot(slot);
  event->set_generation(generation);
  event->set_time_ns(time_ns);
}

TEST(ReleaseToIssueTest, PairsEachNotificationWithTheIssueOfTheSameCopy) {
  v1::TraceReply reply;
  v1::TraceDevice& device = *reply.add_devices();
  // Generation 2 of slot 0 waited for its free: notified at 10 µs, issued at 15 µs.
  AddEvent(device, TraceKind::kAccepted, 7, 0, 2, 1'000);
  AddEvent(device, TraceKind::kReleaseNotified, 7, 0, 2, 10'000);
  // Another slot's copy, issued in between, must not be taken for it.
  AddEvent(device, TraceKind::kCopyIssued, 7, 1, 2, 12'000);
  AddEvent(device, TraceKind::kCopyIssued, 7, 0, 2, 15'000);
  // Slot 1's copy, generation 2, was notified after the daemon recorded
  // other events but with an earlier (client) time: paired by key.
  AddEvent(device, TraceKind::kReleaseNotified, 7, 1, 2, 11'000);
  EXPECT_EQ(ReleaseToIssueMicros(reply), (std::vector<double>{5.0, 1.0}));
}

TEST(ReleaseToIssueTest, IgnoresCopiesThatNeverWaitedAndNotificationsNotYetIssued) {
  v1::TraceReply reply;
  v1::TraceDevice& device = *reply.add_devices();
  AddEvent(device, TraceKind::kCopyIssued, 3, 0, 1, 5'000);       // no wait for free
  AddEvent(device, TraceKind::kReleaseNotified, 3, 1, 1, 6'000);  // issued after the read
  EXPECT_TRUE(ReleaseToIssueMicros(reply).empty());
}

TEST(ReleaseToIssueTest, KeepsRingsApart) {
  v1::TraceReply reply;
  v1::TraceDevice& device = *reply.add_devices();
  AddEvent(device, TraceKind::kReleaseNotified, 1, 0, 4, 1'000);
  AddEvent(device, TraceKind::kCopyIssued, 2, 0, 4, 2'000);
  AddEvent(device, TraceKind::kCopyIssued, 1, 0, 4, 31'000);
  EXPECT_EQ(ReleaseToIssueMicros(reply), (std::vector<double>{30.0}));
}

TEST(ReleaseToIssueTest, PercentileIsTheNearestRankBelow) {
  EXPECT_EQ(Percentile({4, 1, 3, 2, 5}, 0.5), 3);
  EXPECT_EQ(Percentile({4, 1, 3, 2, 5}, 0.99), 4);
  EXPECT_EQ(Percentile({9}, 0.99), 9);
}

}  // namespace
}  // namespace blockswap::bench
