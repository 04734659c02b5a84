// EvictionOrder: the heaviest owner's models first, least recently used
// among equals, a forgotten model as if never used.
#include "daemon/store/eviction_order.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace blockswap::daemon {
namespace {

TEST(EvictionOrderTest, AmongEqualWeightsTheLeastRecentlyUsedGoesFirst) {
  EvictionOrder order;
  order.Touch("a");
  order.Touch("b");
  order.Touch("c");
  EXPECT_EQ(order.First({{"c", 1}, {"b", 1}, {"a", 1}}), "a");
  order.Touch("a");
  EXPECT_EQ(order.First({{"c", 1}, {"b", 1}, {"a", 1}}), "b");
}

TEST(EvictionOrderTest, TheModelsOfTheHeaviestOwnerGoBeforeOlderOnes) {
  EvictionOrder order;
  order.Touch("old-of-a-light-uid");
  order.Touch("new-of-a-flooding-uid");
  EXPECT_EQ(order.First({{"old-of-a-light-uid", 3}, {"new-of-a-flooding-uid", 4096}}),
            "new-of-a-flooding-uid");
}

TEST(EvictionOrderTest, AModelNeverUsedOrForgottenCountsAsOldest) {
  EvictionOrder order;
  order.Touch("used");
  EXPECT_EQ(order.First({{"used", 0}, {"never-used", 0}}), "never-used");
  order.Touch("forgotten");
  order.Touch("used");
  order.Forget("forgotten");
  EXPECT_EQ(order.First({{"used", 0}, {"forgotten", 0}}), "forgotten");
}

TEST(EvictionOrderTest, NoCandidateIsNoVictim) {
  EvictionOrder order;
  order.Touch("a");
  EXPECT_EQ(order.First({}), "");
}

}  // namespace
}  // namespace blockswap::daemon
