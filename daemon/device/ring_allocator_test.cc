#include "daemon/device/ring_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "daemon/budget/memory_budget.h"
#include "shared/backend/backend.h"

namespace blockswap::daemon {
namespace {

constexpr uint64_t kBootId = 0xd3f1ce;
constexpr uint64_t kBudgetBytes = uint64_t{1} << 20;
// Half the budget: the share "auto" gives one uid of a budget of kBudgetBytes.
constexpr RingShape kHalfBudget{.slot_count = 8, .slot_bytes = 64 << 10};
constexpr RingShape kSmall{.slot_count = 2, .slot_bytes = 4096};

class RingAllocatorTest : public ::testing::Test {
 protected:
  Device& device() { return *backend_->devices()[0]; }

  std::unique_ptr<Backend> backend_ = OpenHostBackend({});
  MemoryBudget budget_{kBudgetBytes};
};

TEST_F(RingAllocatorTest, ChargesTheNodeBudgetWhileTheRingIsHeld) {
  RingAllocator allocator(device(), kBootId, {.host_budget = &budget_});
  {
    absl::StatusOr<RingAllocator::Allocated> allocated =
        allocator.Allocate(1, kSmall, 1000, /*device_share=*/false);
    ASSERT_TRUE(allocated.ok()) << allocated.status();
    ASSERT_NE(allocated->ring, nullptr);
    EXPECT_EQ(allocated->ring->shape().slot_count, kSmall.slot_count);
    EXPECT_EQ(budget_.used(MemoryUse::kRings), 2u * 4096);
  }
  EXPECT_EQ(budget_.used(), 0u);
}

TEST_F(RingAllocatorTest, RefusesARingOverTheNodeBudget) {
  RingAllocator allocator(device(), kBootId, {.host_budget = &budget_});
  constexpr RingShape kTooBig{.slot_count = 32, .slot_bytes = 64 << 10};
  absl::StatusOr<RingAllocator::Allocated> allocated = allocator.Allocate(1, kTooBig, 1000, false);
  EXPECT_TRUE(absl::IsResourceExhausted(allocated.status())) << allocated.status();
  EXPECT_EQ(budget_.used(), 0u);
}

TEST_F(RingAllocatorTest, RefusesARingThatWouldEatIntoTheDeviceReserve) {
  // No device has more free memory than all it has.
  RingAllocator allocator(device(), kBootId,
                          {.device_reserve_bytes = device().info().total_memory_bytes});
  absl::StatusOr<RingAllocator::Allocated> allocated = allocator.Allocate(7, kSmall, 1000, false);
  EXPECT_TRUE(absl::IsResourceExhausted(allocated.status())) << allocated.status();
  EXPECT_NE(allocated.status().message().find("ring 7 of 8192 bytes on HOST-0"), std::string::npos)
      << allocated.status();
  EXPECT_NE(allocated.status().message().find("device_memory_reserve_bytes"), std::string::npos)
      << allocated.status();
}

TEST_F(RingAllocatorTest, KeepsEachUidToItsShareOfTheDevice) {
  RingAllocator allocator(device(), kBootId, {.host_budget = &budget_});
  ASSERT_EQ(allocator.share_bytes(), kBudgetBytes / 2);
  absl::StatusOr<RingAllocator::Allocated> first = allocator.Allocate(1, kHalfBudget, 1000, true);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<RingAllocator::Allocated> over = allocator.Allocate(2, kSmall, 1000, true);
  EXPECT_TRUE(absl::IsResourceExhausted(over.status())) << over.status();
  EXPECT_NE(over.status().message().find("max_device_bytes_per_uid"), std::string::npos)
      << over.status();
  // Another uid has its own share; a ring outside the share is not counted.
  EXPECT_TRUE(allocator.Allocate(3, kSmall, 1001, true).ok());
  EXPECT_TRUE(allocator.Allocate(4, kSmall, 1000, false).ok());
  // Freeing the first ring gives its share back.
  first = absl::CancelledError("freed");
  EXPECT_TRUE(allocator.Allocate(5, kSmall, 1000, true).ok());
}

}  // namespace
}  // namespace blockswap::daemon
