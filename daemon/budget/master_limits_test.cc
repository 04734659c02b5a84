#include "daemon/budget/master_limits.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace blockswap::daemon {
namespace {

bool AnyContains(const std::vector<std::string>& warnings, const std::string& text) {
  for (const std::string& warning : warnings) {
    if (absl::StrContains(warning, text)) return true;
  }
  return false;
}

TEST(MasterLimits, AutoIsHalfOfTheMapCountAndTheBudget) {
  EXPECT_EQ(AutoMaxMasterBlocks(65530), 32765u);
  EXPECT_EQ(AutoMaxMasterBlocks(0), 32768u) << "unknown";
  EXPECT_EQ(AutoMaxMasterBytesPerUid(uint64_t{96} << 30), uint64_t{48} << 30);
  EXPECT_EQ(AutoMaxMasterBytesPerUid(0), 0u) << "an unlimited budget stays unlimited";
}

TEST(MasterLimits, TheMapCountIsReadFromProc) {
  const std::string path = absl::StrCat("/tmp/blockswap-map-count-", ::getpid());
  std::ofstream(path) << "262144\n";
  EXPECT_EQ(ReadMaxMapCount(path), 262144u);
  ::unlink(path.c_str());
  EXPECT_EQ(ReadMaxMapCount(path), 0u);
}

// The defaults on a node with a 96 GiB budget and the kernel's defaults.
MasterLimitsInput CommonNode() {
  return {.max_memory_bytes = uint64_t{96} << 30,
          .max_master_blocks = 32765,
          .max_master_blocks_per_uid = 4096,
          .max_map_count = 65530,
          .open_files = 65536,
          .descriptors_one_uid_may_hold = 2816};
}

TEST(MasterLimits, TheDefaultsOnACommonNodeWarnOfNothingAndNoteWhichLimitBoundsSmallBlocks) {
  const MasterLimitsReport report = AssessMasterLimits(CommonNode());
  EXPECT_TRUE(report.warnings.empty()) << report.warnings[0];
  ASSERT_EQ(report.notes.size(), 1u);
  // 96 GiB / 32765 blocks: 3.0 MiB a block.
  EXPECT_TRUE(AnyContains(report.notes,
                          "max_master_blocks = 32765 bounds the node's master "
                          "blocks (vm.max_map_count = 65530): models whose blocks "
                          "average under 3.0 MiB reach it before max_memory_bytes"))
      << report.notes[0];
}

TEST(MasterLimits, ABudgetTheBlockLimitCannotBindBeforeHasNoNote) {
  MasterLimitsInput in = CommonNode();
  in.max_memory_bytes = uint64_t{32765} * 8192;  // exactly max_master_blocks one-page blocks
  EXPECT_TRUE(AssessMasterLimits(in).notes.empty());
  in.max_memory_bytes += 8192;
  EXPECT_EQ(AssessMasterLimits(in).notes.size(), 1u);
}

TEST(MasterLimits, ADescriptorLimitBelowOneUidsQuotasPlusTheReserveSaysWhatToRaise) {
  MasterLimitsInput in = CommonNode();
  in.open_files = 1024;
  const std::vector<std::string> warnings = AssessMasterLimits(in).warnings;
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(AnyContains(warnings, "RLIMIT_NOFILE = 1024 is less than the 2816 descriptors"));
  EXPECT_TRUE(AnyContains(warnings, "raise LimitNOFILE= in blockswapd.service to at least 3840"));
  in.open_files = 3840;
  EXPECT_TRUE(AssessMasterLimits(in).warnings.empty()) << "3840 is enough";
}

TEST(MasterLimits, AUidThatMayHoldAnyNumberOfDescriptorsIsWarnedOf) {
  MasterLimitsInput in = CommonNode();
  in.descriptors_one_uid_may_hold = UINT64_MAX;  // DescriptorsOneUidMayHold: a quota is 0
  const std::vector<std::string> warnings = AssessMasterLimits(in).warnings;
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(AnyContains(warnings, "one uid may hold any number of descriptors"));
  EXPECT_TRUE(AnyContains(warnings, "RLIMIT_NOFILE = 65536"));
}

TEST(MasterLimits, ABlockLimitNearTheMapCountSaysWhatToRaise) {
  MasterLimitsInput in = CommonNode();
  in.max_master_blocks = 60000;
  const std::vector<std::string> warnings = AssessMasterLimits(in).warnings;
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(AnyContains(warnings, "max_master_blocks = 60000 leaves less than a quarter of "
                                    "vm.max_map_count = 65530"));
  EXPECT_TRUE(AnyContains(warnings, "raise vm.max_map_count"));
  in.max_master_blocks = 65530 - 65530 / 4;
  EXPECT_TRUE(AssessMasterLimits(in).warnings.empty()) << "a quarter left is enough";
}

TEST(MasterLimits, NoBlockLimitUnderAKnownMapCountWarns) {
  MasterLimitsInput in = CommonNode();
  in.max_master_blocks = 0;
  const std::vector<std::string> warnings = AssessMasterLimits(in).warnings;
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(
      AnyContains(warnings, "max_master_blocks = 0 (unlimited) leaves less than a quarter"));
}

TEST(MasterLimits, APerUidBlockLimitNotBelowTheNodesSaysOneUidMayTakeEveryBlock) {
  MasterLimitsInput in = CommonNode();
  in.max_master_blocks_per_uid = 32765;
  std::vector<std::string> warnings = AssessMasterLimits(in).warnings;
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(AnyContains(warnings,
                          "max_master_blocks_per_uid = 32765 is not below "
                          "max_master_blocks = 32765: one uid may hold every master "
                          "block"));
  EXPECT_TRUE(AnyContains(warnings, "lower max_master_blocks_per_uid below 32765"));
  in.max_master_blocks_per_uid = 0;
  warnings = AssessMasterLimits(in).warnings;
  EXPECT_TRUE(AnyContains(warnings, "max_master_blocks_per_uid = 0 (unlimited) is not below"));
  in.max_master_blocks_per_uid = 32764;
  EXPECT_TRUE(AssessMasterLimits(in).warnings.empty());
}

}  // namespace
}  // namespace blockswap::daemon
