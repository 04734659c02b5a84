#include "daemon/device/device_trace.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "shared/protocol/trace_log.h"

namespace blockswap::daemon {
namespace {

TraceEvent Event(uint64_t time_ns, TraceKind kind, uint64_t ring_id = 1, uint32_t slot = 0) {
  TraceEvent event;
  event.time_ns = time_ns;
  event.ring_id = ring_id;
  event.slot = slot;
  event.kind = kind;
  return event;
}

std::vector<uint64_t> Times(const std::vector<TraceEvent>& events) {
  std::vector<uint64_t> times;
  for (const TraceEvent& event : events) times.push_back(event.time_ns);
  return times;
}

RingTrace FreedRing(uint64_t ring_id, std::vector<TraceEvent> events, uint64_t lost = 0) {
  RingTrace trace;
  trace.ring_id = ring_id;
  trace.events = std::move(events);
  trace.lost = lost;
  return trace;
}

TEST(ValidClientTraceTest, KeepsTheClientsEventsOfItsRingAndSlots) {
  TraceSnapshot read;
  read.lost = 3;
  read.events = {Event(10, TraceKind::kRequest, 5, 0), Event(11, TraceKind::kWait, 5, 3),
                 Event(12, TraceKind::kAccepted, 5, 0),  // a daemon's kind
                 Event(13, TraceKind::kRelease, 6, 0),   // another ring
                 Event(14, TraceKind::kStall, 5, 4)};    // past the last slot
  RingTrace trace =
      ValidClientTrace(5, 9, RingOwner{.pid = 42, .client_name = "trainer", .uid = 1000}, 4, read);
  EXPECT_EQ(trace.ring_id, 5u);
  EXPECT_EQ(trace.session_id, 9u);
  EXPECT_EQ(trace.owner.pid, 42u);
  EXPECT_EQ(trace.owner.client_name, "trainer");
  EXPECT_EQ(trace.owner.uid, 1000u);
  EXPECT_FALSE(trace.retired);
  EXPECT_EQ(Times(trace.events), (std::vector<uint64_t>{10, 11}));
  EXPECT_EQ(trace.invalid, 3u);
  EXPECT_EQ(trace.lost, 3u);
}

TEST(DeviceTraceLogTest, ReadsTheEventsSinceInTimeOrder) {
  DeviceTraceLog log(16, 4);
  // Recorded out of order, as the worker records an issue time taken before.
  log.Record(Event(30, TraceKind::kAccepted));
  log.Record(Event(10, TraceKind::kCopyIssued));
  log.Record(Event(20, TraceKind::kFilled));
  log.Record(Event(5, TraceKind::kCopyDone));
  EXPECT_EQ(Times(log.ReadEvents(0).events), (std::vector<uint64_t>{5, 10, 20, 30}));
  EXPECT_EQ(Times(log.ReadEvents(20).events), (std::vector<uint64_t>{20, 30}));
}

TEST(DeviceTraceLogTest, KeepsTheNewestEventsAndCountsTheRestAsLost) {
  DeviceTraceLog log(4, 4);
  for (uint64_t t = 1; t <= 6; ++t) log.Record(Event(t, TraceKind::kAccepted));
  DeviceTrace trace = log.ReadEvents(0);
  // TraceLog::Read may also leave out the entry the writer would overwrite
  // next: only that no event is both missing and uncounted is fixed.
  ASSERT_FALSE(trace.events.empty());
  EXPECT_EQ(trace.events.back().time_ns, 6u);
  EXPECT_EQ(trace.lost + trace.events.size(), 6u);
  EXPECT_GE(trace.lost, 2u);
}

TEST(DeviceTraceLogTest, KeepsTheNewestFreedRingsMarkedRetired) {
  DeviceTraceLog log(16, 2);
  log.KeepFreedRing(FreedRing(1, {}));
  log.KeepFreedRing(FreedRing(2, {}));
  log.KeepFreedRing(FreedRing(3, {}));
  DeviceTrace trace;
  log.ReadFreedRings(0, trace);
  ASSERT_EQ(trace.rings.size(), 2u);
  EXPECT_EQ(trace.rings[0].ring_id, 2u);
  EXPECT_EQ(trace.rings[1].ring_id, 3u);
  EXPECT_TRUE(trace.rings[0].retired);
  EXPECT_TRUE(trace.rings[1].retired);
  EXPECT_EQ(trace.retired_rings_dropped, 1u);
}

TEST(DeviceTraceLogTest, CutsFreedRingsToTheWindow) {
  DeviceTraceLog log(16, 4);
  log.KeepFreedRing(FreedRing(
      1,
      {Event(10, TraceKind::kRequest), Event(20, TraceKind::kWait), Event(30, TraceKind::kRelease)},
      /*lost=*/7));
  DeviceTrace trace;
  log.ReadFreedRings(20, trace);
  ASSERT_EQ(trace.rings.size(), 1u);
  EXPECT_EQ(Times(trace.rings[0].events), (std::vector<uint64_t>{20, 30}));
  // What the ring lost is older than its first event, which is before the
  // window: none of the window was lost.
  EXPECT_EQ(trace.rings[0].lost, 0u);
}

TEST(DeviceTraceLogTest, AFreedRingThatStartsInTheWindowKeepsItsLoss) {
  DeviceTraceLog log(16, 4);
  log.KeepFreedRing(FreedRing(1, {Event(30, TraceKind::kRequest)}, /*lost=*/7));
  DeviceTrace trace;
  log.ReadFreedRings(20, trace);
  ASSERT_EQ(trace.rings.size(), 1u);
  EXPECT_EQ(trace.rings[0].lost, 7u);
  DeviceTrace all;
  log.ReadFreedRings(0, all);
  EXPECT_EQ(all.rings[0].lost, 7u);
}

}  // namespace
}  // namespace blockswap::daemon
