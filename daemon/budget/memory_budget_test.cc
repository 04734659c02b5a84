#include "daemon/budget/memory_budget.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "daemon/budget/memory_limit.h"

namespace blockswap::daemon {
namespace {

TEST(MemoryBudget, EveryUseIsChargedAgainstTheOneLimitAndTheRefusalSaysWhatIsHeld) {
  MemoryBudget budget(1000);
  auto masters = budget.Reserve(MemoryUse::kMasters, 400, "model m");
  auto staging = budget.Reserve(MemoryUse::kStaging, 300, "upload 1");
  ASSERT_TRUE(masters.ok() && staging.ok());
  absl::StatusOr<Reservation> ring = budget.Reserve(MemoryUse::kRings, 301, "a ring for pid 9");
  ASSERT_EQ(ring.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(
      ring.status().message(),
      "a ring for pid 9: blockswapd would hold 1001 bytes of memory (700 held + 301 asked), "
      "over max_memory_bytes = 1000 (held: masters 400, staging 300, rings 0, copy staging 0)");
  EXPECT_FALSE(budget.CheckFits(301, "x").ok());
  EXPECT_TRUE(budget.CheckFits(300, "x").ok());
  ASSERT_TRUE(budget.Reserve(MemoryUse::kRings, 300, "a ring").ok());  // dropped at once
  EXPECT_EQ(budget.used(), 700u);
  staging->Release();
  EXPECT_EQ(budget.used(), 400u);
  EXPECT_EQ(budget.used(MemoryUse::kStaging), 0u);
  EXPECT_TRUE(budget.Reserve(MemoryUse::kRings, 600, "a ring").ok());
}

TEST(MemoryBudget, WithTotalsWithheldARefusalNamesTheLimitAndTheAskOnly) {
  MemoryBudget budget(1000, "model_access = registrant-group");
  auto masters = budget.Reserve(MemoryUse::kMasters, 400, "model m");
  ASSERT_TRUE(masters.ok());
  absl::StatusOr<Reservation> ring = budget.Reserve(MemoryUse::kRings, 601, "a ring for pid 9");
  ASSERT_EQ(ring.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ring.status().message(),
            "a ring for pid 9: 601 bytes of memory asked do not fit in what max_memory_bytes = "
            "1000 leaves (what blockswapd holds is not shown under model_access = "
            "registrant-group)");
  EXPECT_EQ(budget.CheckFits(601, "a ring for pid 9").message(), ring.status().message());
}

TEST(MemoryBudget, ZeroIsUnlimitedButStillCounted) {
  MemoryBudget budget(0);
  auto big = budget.Reserve(MemoryUse::kRings, uint64_t{1} << 50, "a ring");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(budget.used(MemoryUse::kRings), uint64_t{1} << 50);
}

TEST(MemoryLimit, TheSmallestLimitAlongTheCgroupPathWins) {
  // A fake cgroup tree with this process's own path, as /proc/self/cgroup names it.
  std::ifstream in("/proc/self/cgroup");
  std::string line, v1_path;
  while (std::getline(in, line)) {
    if (absl::StrContains(line, ":memory:")) v1_path = line.substr(line.rfind(':') + 1);
  }
  if (v1_path.empty() || v1_path == "/") GTEST_SKIP() << "no cgroup v1 memory path to mirror";
  const std::string root = ::testing::TempDir() + "/fake-cgroup";
  std::filesystem::create_directories(root + "/memory" + v1_path);
  std::ofstream(root + "/memory" + v1_path + "/memory.limit_in_bytes") << "1048576\n";
  std::ofstream(root + "/memory/memory.limit_in_bytes") << "9223372036854771712\n";
  MemoryLimit limit = ProcessMemoryLimit(root);
  EXPECT_EQ(limit.bytes, 1048576u);
  EXPECT_EQ(limit.source, "memory cgroup " + v1_path + " (memory.limit_in_bytes)");
  EXPECT_EQ(AutoMaxMemoryBytes(limit), 786432u);
  std::filesystem::remove_all(root);
  MemoryLimit physical = ProcessMemoryLimit(root);
  EXPECT_EQ(physical.source, "physical memory");
  EXPECT_GT(physical.bytes, 0u);
}

}  // namespace
}  // namespace blockswap::daemon
