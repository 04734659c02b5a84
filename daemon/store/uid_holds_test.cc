#include "daemon/store/uid_holds.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace blockswap::daemon {
namespace {

TEST(UidHolds, ABlockCountsOnceForAUidHoweverManyOfItsModelsNameIt) {
  UidHolds holds;
  holds.Add(1000, {{"a", 4096}, {"b", 8192}});
  holds.Add(1000, {{"b", 8192}, {"c", 4096}});
  EXPECT_EQ(holds.blocks(1000), 3u);
  EXPECT_EQ(holds.bytes(1000), 16384u);
  holds.Remove(1000, {{"a", 4096}, {"b", 8192}});
  EXPECT_EQ(holds.blocks(1000), 2u) << "b is still named by the second model";
  EXPECT_EQ(holds.bytes(1000), 12288u);
  holds.Remove(1000, {{"b", 8192}, {"c", 4096}});
  EXPECT_EQ(holds.blocks(1000), 0u);
  EXPECT_EQ(holds.bytes(1000), 0u);
}

TEST(UidHolds, EveryUidIsChargedInFullIndependently) {
  UidHolds holds;
  holds.Add(1000, {{"a", 4096}});
  holds.Add(1001, {{"a", 4096}});
  EXPECT_EQ(holds.blocks(1000), 1u);
  EXPECT_EQ(holds.blocks(1001), 1u);
  holds.Remove(1000, {{"a", 4096}});
  EXPECT_EQ(holds.blocks(1001), 1u);
}

TEST(UidHolds, CheckCountsOnlyWhatTheUidDoesNotHoldYet) {
  UidHolds holds;
  holds.Add(1000, {{"a", 4096}, {"b", 4096}});
  const UidMasterLimits limits{.max_blocks = 3, .max_bytes = 0};
  EXPECT_TRUE(holds.Check(1000, {{"a", 4096}, {"c", 4096}}, limits).ok());
  absl::Status over = holds.Check(1000, {{"c", 4096}, {"d", 4096}}, limits);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.message(),
                                "uid 1000 would hold 4 blocks of masters (2 held + 2 of this model), "
                                "over max_master_blocks_per_uid = 3"))
      << over;
  EXPECT_TRUE(holds.Check(1001, {{"c", 4096}, {"d", 4096}, {"e", 4096}}, limits).ok());
  EXPECT_TRUE(holds.Check(1000, {{"c", 4096}, {"d", 4096}}, {}).ok()) << "0: unlimited";
}

}  // namespace
}  // namespace blockswap::daemon
