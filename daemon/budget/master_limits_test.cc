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

TEST(MasterLimits, TheDefaultsOnACommonNodeWarnOnlyThatTheMapCountDecidesForTinyBlocks) {
  MasterLimitsInput in{.max_memory_bytes = uint64_t{96} << 30,
                       .max_master_blocks = 32765,
                       .max_map_count = 65530,
                       .open_files = 65536,
                       .descriptors_one_uid_may_hold = 2816};
  const std::vector<std::string> warnings = MasterLimitWarnings(in);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(AnyContains(warnings, "raise vm.max_map_count to at least ")) << warnings[0];
}

TEST(MasterLimits, ADescriptorLimitBelowOneUidsQuotasPlusTheReserveSaysWhatToRaise) {
  MasterLimitsInput in{.max_memory_bytes = 0,
                       .max_master_blocks = 1000,
                       .max_map_count = 65530,
                       .open_files = 1024,
                       .descriptors_one_uid_may_hold = 2816};
  const std::vector<std::string> warnings = MasterLimitWarnings(in);
  EXPECT_TRUE(AnyContains(warnings, "RLIMIT_NOFILE = 1024 is less than the 2816 descriptors"));
  EXPECT_TRUE(AnyContains(warnings, "raise LimitNOFILE= in blockswapd.service to at least 3840"));
}

TEST(MasterLimits, ABlockLimitNearTheMapCountSaysWhatToRaise) {
  MasterLimitsInput in{.max_memory_bytes = 0,
                       .max_master_blocks = 60000,
                       .max_map_count = 65530,
                       .open_files = 65536,
                       .descriptors_one_uid_may_hold = 0};
  const std::vector<std::string> warnings = MasterLimitWarnings(in);
  EXPECT_TRUE(AnyContains(warnings, "max_master_blocks = 60000 leaves less than a quarter of "
                                    "vm.max_map_count = 65530"));
}

}  // namespace
}  // namespace blockswap::daemon
