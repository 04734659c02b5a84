#include "shared/protocol/trace_log.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace blockswap {
namespace {

// Every field derives from `i`, so a torn entry (words of two events) shows.
TraceEvent EventNumber(uint64_t i) {
  TraceEvent event;
  event.time_ns = 1000 + i;
  event.ring_id = i * 3;
  event.value = ~i;
  event.slot = static_cast<uint32_t>(i % 7);
  event.generation = static_cast<uint32_t>(i);
  event.block = static_cast<uint32_t>(i * 5);
  event.kind = i % 2 == 0 ? TraceKind::kRequest : TraceKind::kWait;
  event.flags = static_cast<uint16_t>(i % 3);
  return event;
}

void ExpectIsEventNumber(const TraceEvent& event, uint64_t i) {
  const TraceEvent want = EventNumber(i);
  EXPECT_EQ(event.time_ns, want.time_ns);
  EXPECT_EQ(event.ring_id, want.ring_id);
  EXPECT_EQ(event.value, want.value);
  EXPECT_EQ(event.slot, want.slot);
  EXPECT_EQ(event.generation, want.generation);
  EXPECT_EQ(event.block, want.block);
  EXPECT_EQ(event.kind, want.kind);
  EXPECT_EQ(event.flags, want.flags);
}

TEST(TraceLog, ReturnsEveryFieldOfEachEventInOrder) {
  TraceBuffer buffer(16);
  for (uint64_t i = 0; i < 10; ++i) buffer.ring().Record(EventNumber(i));
  TraceSnapshot snapshot = buffer.ring().Read();
  ASSERT_EQ(snapshot.events.size(), 10u);
  for (uint64_t i = 0; i < 10; ++i) ExpectIsEventNumber(snapshot.events[i], i);
  EXPECT_EQ(snapshot.lost, 0u);
  EXPECT_EQ(snapshot.written, 10u);
}

TEST(TraceLog, WrapKeepsTheNewestAndCountsTheRestAsLost) {
  TraceBuffer buffer(8);
  for (uint64_t i = 0; i < 21; ++i) buffer.ring().Record(EventNumber(i));
  TraceSnapshot snapshot = buffer.ring().Read();
  // The slot of entry 13 is the one the next Record writes first, so it is
  // not trusted: 14..20 come back.
  ASSERT_EQ(snapshot.events.size(), 7u);
  for (uint64_t k = 0; k < 7; ++k) ExpectIsEventNumber(snapshot.events[k], 14 + k);
  EXPECT_EQ(snapshot.lost, 14u);
  EXPECT_EQ(snapshot.written, 21u);
}

TEST(TraceLog, SinceDropsOlderEventsWithoutCountingThemLost) {
  TraceBuffer buffer(16);
  for (uint64_t i = 0; i < 10; ++i) buffer.ring().Record(EventNumber(i));
  TraceSnapshot snapshot = buffer.ring().Read(EventNumber(6).time_ns);
  ASSERT_EQ(snapshot.events.size(), 4u);
  ExpectIsEventNumber(snapshot.events[0], 6);
  EXPECT_EQ(snapshot.lost, 0u);
}

TEST(TraceLog, LossBeforeTheWindowIsNotReported) {
  TraceBuffer buffer(8);
  for (uint64_t i = 0; i < 21; ++i) buffer.ring().Record(EventNumber(i));
  // 14..20 are held: a window from 15 lost nothing, one from 10 did.
  EXPECT_EQ(buffer.ring().Read(EventNumber(15).time_ns).lost, 0u);
  EXPECT_EQ(buffer.ring().Read(EventNumber(15).time_ns).events.size(), 6u);
  EXPECT_EQ(buffer.ring().Read(EventNumber(10).time_ns).lost, 14u);
}

TEST(TraceLog, ReaderNeverReturnsATornEntryWhileTheWriterOverwrites) {
  // A ring this small is lapped by the writer while reads are under way;
  // without the second read of the index (or with it off by one) this test
  // sees torn and overwritten entries within milliseconds.
  TraceBuffer buffer(3);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      buffer.ring().Record(EventNumber(i));
    }
  });
  uint64_t reads_with_loss = 0;
  uint64_t events_checked = 0;
  // Until the writer has outrun the reader often enough (both threads may
  // share one loaded core, so count, do not time).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int round = 0; (round < 200000 || reads_with_loss < 50) &&
                      std::chrono::steady_clock::now() < deadline;
       ++round) {
    TraceSnapshot snapshot = buffer.ring().Read();
    reads_with_loss += snapshot.lost > 0 ? 1 : 0;
    for (size_t k = 0; k < snapshot.events.size(); ++k) {
      const TraceEvent& event = snapshot.events[k];
      uint64_t i = event.time_ns - 1000;
      ExpectIsEventNumber(event, i);
      if (k > 0) {
        EXPECT_EQ(i, snapshot.events[k - 1].time_ns - 1000 + 1);
      }
      ++events_checked;
    }
    EXPECT_EQ(snapshot.events.size() + snapshot.lost, snapshot.written);
    if (::testing::Test::HasFailure()) break;
  }
  stop = true;
  writer.join();
  EXPECT_GT(events_checked, 0u);
  EXPECT_GT(reads_with_loss, 0u) << "the writer never outran the reader: nothing was tested";
}

TEST(TraceLog, RingsInOneBlockOfMemoryAreIndependentViews) {
  // As in shared memory: the creator initialises, another view reads.
  struct alignas(64) Memory {
    std::byte bytes[TraceLogBytes(4)];
  } memory;
  TraceLog writer(&memory, 4);
  writer.Initialize();
  writer.Record(EventNumber(1));
  TraceLog reader(&memory, 4);
  TraceSnapshot snapshot = reader.Read();
  ASSERT_EQ(snapshot.events.size(), 1u);
  ExpectIsEventNumber(snapshot.events[0], 1);
}

TEST(TraceLog, KindsHaveNames) {
  EXPECT_EQ(TraceKindName(TraceKind::kCopyDone), "copy-done");
  EXPECT_EQ(TraceKindName(TraceKind::kWait), "wait");
  EXPECT_TRUE(IsClientTraceKind(static_cast<uint16_t>(TraceKind::kRelease)));
  EXPECT_FALSE(IsClientTraceKind(static_cast<uint16_t>(TraceKind::kAccepted)));
  EXPECT_TRUE(IsDaemonTraceKind(static_cast<uint16_t>(TraceKind::kRejected)));
}

}  // namespace
}  // namespace blockswap
