#include "daemon/device/staging_charge.h"

#include <gtest/gtest.h>

#include "daemon/budget/memory_budget.h"
#include "shared/backend/backend.h"

namespace blockswap::daemon {
namespace {

constexpr StagingOptions kPool{.buffer_bytes = 64 << 10, .buffers = 3, .threads = 2};

TEST(StagingCharge, IsTakenFromTheNodeBudgetUntilReleased) {
  auto backend = OpenHostBackend({});
  MemoryBudget budget(1 << 20);
  {
    absl::StatusOr<Reservation> charge = ChargeStagingPool(*backend->devices()[0], kPool, &budget);
    ASSERT_TRUE(charge.ok()) << charge.status();
    EXPECT_EQ(budget.used(MemoryUse::kCopyStaging), uint64_t{3} << 16);
  }
  EXPECT_EQ(budget.used(), 0u);
}

TEST(StagingCharge, OverTheBudgetIsRefusedNamingThePool) {
  auto backend = OpenHostBackend({});
  MemoryBudget budget(100 << 10);
  absl::StatusOr<Reservation> charge = ChargeStagingPool(*backend->devices()[0], kPool, &budget);
  EXPECT_TRUE(absl::IsResourceExhausted(charge.status())) << charge.status();
  EXPECT_NE(charge.status().message().find("max_memory_bytes"), absl::string_view::npos)
      << charge.status();
  EXPECT_NE(charge.status().message().find("staging buffers of HOST-0"), absl::string_view::npos)
      << charge.status();
  EXPECT_EQ(budget.used(), 0u);
}

TEST(StagingCharge, AnEmptyPoolIsRefusedBeforeAnythingIsCharged) {
  auto backend = OpenHostBackend({});
  MemoryBudget budget(1 << 20);
  StagingOptions empty = kPool;
  empty.threads = 0;
  absl::StatusOr<Reservation> charge = ChargeStagingPool(*backend->devices()[0], empty, &budget);
  EXPECT_TRUE(absl::IsInvalidArgument(charge.status())) << charge.status();
  EXPECT_EQ(budget.used(), 0u);
}

}  // namespace
}  // namespace blockswap::daemon
