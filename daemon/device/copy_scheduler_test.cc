#include "daemon/device/copy_scheduler.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace blockswap::daemon {
namespace {

// Runs `turns` picks; `ready(ring_id, turn)` says whether a ring has a ready
// copy at that turn. Returns the issuing ring per turn (turns where nothing
// was ready are skipped).
std::vector<uint64_t> IssueOrder(CopyScheduler& scheduler, const std::vector<uint64_t>& rings,
                                 int turns, const std::function<bool(uint64_t, int)>& ready) {
  std::vector<uint64_t> order;
  for (int turn = 0; turn < turns; ++turn) {
    std::vector<uint64_t> ready_rings;
    for (uint64_t ring : rings) {
      if (ready(ring, turn)) ready_rings.push_back(ring);
    }
    if (ready_rings.empty()) continue;
    const uint64_t picked = ready_rings[scheduler.Pick(ready_rings)];
    scheduler.Issued(picked);
    order.push_back(picked);
  }
  return order;
}

bool AlwaysReady(uint64_t, int) { return true; }

TEST(CopySchedulerTest, TwoReadyRingsOfEqualWeightTakeOneCopyEachPerTurn) {
  CopyScheduler scheduler;
  scheduler.AddRing(7, 1);
  scheduler.AddRing(3, 1);
  const std::vector<uint64_t> order = IssueOrder(scheduler, {3, 7}, 100, AlwaysReady);
  ASSERT_EQ(order.size(), 100u);
  for (size_t i = 1; i < order.size(); ++i) {
    EXPECT_NE(order[i], order[i - 1]) << "ring " << order[i] << " issued twice in a row at " << i;
  }
}

TEST(CopySchedulerTest, ThreeRingsGoRoundRobin) {
  CopyScheduler scheduler;
  for (uint64_t ring : {1, 2, 3}) scheduler.AddRing(ring, 1);
  const std::vector<uint64_t> order = IssueOrder(scheduler, {1, 2, 3}, 99, AlwaysReady);
  for (size_t i = 3; i < order.size(); ++i) {
    EXPECT_EQ(order[i], order[i - 3]) << "turn " << i << " broke the rotation";
  }
  std::map<uint64_t, int> counts;
  for (uint64_t ring : order) ++counts[ring];
  EXPECT_EQ(counts[1], 33);
  EXPECT_EQ(counts[2], 33);
  EXPECT_EQ(counts[3], 33);
}

TEST(CopySchedulerTest, ARingsShareIsItsWeightOverTheReadyRingsWeights) {
  CopyScheduler scheduler;
  scheduler.AddRing(1, 3);
  scheduler.AddRing(2, 1);
  scheduler.AddRing(3, 1);  // never ready: its weight does not count
  const std::vector<uint64_t> order =
      IssueOrder(scheduler, {1, 2, 3}, 400, [](uint64_t ring, int) { return ring != 3; });
  std::map<uint64_t, int> counts;
  int longest_heavy_run = 0;
  int run = 0;
  for (uint64_t ring : order) {
    ++counts[ring];
    run = ring == 1 ? run + 1 : 0;
    longest_heavy_run = std::max(longest_heavy_run, run);
  }
  EXPECT_NEAR(counts[1], 300, 1);
  EXPECT_NEAR(counts[2], 100, 1);
  EXPECT_EQ(counts[3], 0);
  // Interleaved, not in bursts: the light ring waits for 3 heavy copies at most.
  EXPECT_LE(longest_heavy_run, 3);
}

TEST(CopySchedulerTest, AnIdleRingBanksNoCreditAndTakesTheNextTurnWhenBack) {
  CopyScheduler scheduler;
  scheduler.AddRing(1, 1);
  scheduler.AddRing(2, 1);
  // Ring 2 is idle for the first 100 turns, then always ready.
  const std::vector<uint64_t> order = IssueOrder(
      scheduler, {1, 2}, 200, [](uint64_t ring, int turn) { return ring == 1 || turn >= 100; });
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], 1u) << i;
  EXPECT_EQ(order[100], 2u) << "back from idle: the very next turn";
  for (size_t i = 101; i < order.size(); ++i) {
    EXPECT_NE(order[i], order[i - 1]) << "a burst at " << i << ": ring 2 banked its idle time";
  }
}

// The issue's order rule for a streamer beside a flooder: the streamer has a
// ready copy now and then (its compute between), the flooder always; from
// the streamer's copy becoming ready to its issue, at most one flooder copy.
TEST(CopySchedulerTest, AnOccasionallyReadyRingWaitsForAtMostOneCopyOfAnAlwaysReadyOne) {
  CopyScheduler scheduler;
  scheduler.AddRing(1, 1);  // flooder
  scheduler.AddRing(2, 1);  // streamer
  for (int gap : {1, 2, 3, 5, 8}) {
    int streamer_ready_at = 0;  // the turn its copy became ready (-1: none ready)
    int flooder_copies_since = 0;
    for (int turn = 0; turn < 400; ++turn) {
      std::vector<uint64_t> ready_rings{1};
      if (streamer_ready_at < 0 && turn % gap == 0) {
        streamer_ready_at = turn;
        flooder_copies_since = 0;
      }
      if (streamer_ready_at >= 0) ready_rings.push_back(2);
      const uint64_t picked = ready_rings[scheduler.Pick(ready_rings)];
      scheduler.Issued(picked);
      if (picked == 1) {
        if (streamer_ready_at >= 0) ++flooder_copies_since;
      } else {
        EXPECT_LE(flooder_copies_since, 1) << "gap " << gap << " turn " << turn;
        streamer_ready_at = -1;
      }
    }
  }
}

TEST(CopySchedulerTest, TheStreamIsLimitedOnlyWhileMoreThanOneRingIsServed) {
  CopyScheduler scheduler;
  EXPECT_EQ(scheduler.stream_limit(), std::numeric_limits<size_t>::max());
  scheduler.AddRing(1, 1);
  EXPECT_EQ(scheduler.stream_limit(), std::numeric_limits<size_t>::max())
      << "a ring alone has the stream to itself";
  scheduler.AddRing(2, 1);
  EXPECT_EQ(scheduler.stream_limit(), CopyScheduler::kStreamDepth);
  scheduler.RemoveRing(1);
  EXPECT_EQ(scheduler.stream_limit(), std::numeric_limits<size_t>::max());
  EXPECT_EQ(scheduler.ring_count(), 1u);
}

TEST(CopySchedulerTest, AWeightIsLookedUpByUidAndDefaultsToOne) {
  const CopyWeights weights{{1000, 4}, {1001, 2}};
  EXPECT_EQ(CopyWeightOf(weights, 1000), 4u);
  EXPECT_EQ(CopyWeightOf(weights, 1001), 2u);
  EXPECT_EQ(CopyWeightOf(weights, 0), kDefaultCopyWeight);
  EXPECT_EQ(CopyWeightOf({}, 1000), kDefaultCopyWeight);
}

}  // namespace
}  // namespace blockswap::daemon
