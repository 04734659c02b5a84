// The pinning policy's decision for each master region, on the host backend
// with its pin limit standing in for a small RLIMIT_MEMLOCK.
#include "daemon/store/master_pinning.h"

#include <gtest/gtest.h>

#include <vector>

#include "shared/backend/backend.h"

namespace blockswap::daemon {
namespace {

class MasterPinningTest : public ::testing::Test {
 protected:
  Device& device() { return *backend_->devices()[0]; }
  std::unique_ptr<Backend> backend_ = OpenHostBackend({.pin_limit_bytes = 3000});
  std::vector<std::byte> memory_ = std::vector<std::byte>(8000);
};

TEST(PinningPolicyNames, ParseAndPrintTheThreeAndRefuseOthers) {
  for (PinningPolicy policy :
       {PinningPolicy::kAuto, PinningPolicy::kAlways, PinningPolicy::kNever}) {
    EXPECT_EQ(*ParsePinningPolicy(PinningPolicyName(policy)), policy);
  }
  absl::StatusOr<PinningPolicy> bad = ParsePinningPolicy("sometimes");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(bad.status().message().find("expected auto, always or never"), absl::string_view::npos);
}

TEST_F(MasterPinningTest, AutoPinsWhatTheBudgetAllowsAndStagesTheRest) {
  MasterPinning pinning(PinningPolicy::kAuto, /*max_pinned_bytes=*/2500, &device());
  auto first = pinning.PinOrStage(memory_.data(), 2000, "block a");
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->pinned());
  EXPECT_FALSE(first->staged());
  auto second = pinning.PinOrStage(memory_.data() + 2000, 1000, "block b");
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->staged()) << "over max_pinned_bytes";
  EXPECT_EQ(pinning.pinned_bytes(), 2000u);
  *first = MasterResidency();
  EXPECT_EQ(pinning.pinned_bytes(), 0u) << "an unpinned master returns its share";
}

TEST_F(MasterPinningTest, AutoStagesWhatTheDeviceRefusesToPin) {
  MasterPinning pinning(PinningPolicy::kAuto, /*max_pinned_bytes=*/0, &device());
  auto refused = pinning.PinOrStage(memory_.data(), 4000, "block c");  // over the device's 3000
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_TRUE(refused->staged());
  EXPECT_EQ(pinning.pinned_bytes(), 0u) << "a refused pinning holds no share of the budget";
  EXPECT_NE(refused->refusal().message().find("HOST-0 could not pin the 4000 bytes of block c"),
            absl::string_view::npos)
      << refused->refusal();
  auto fits = pinning.PinOrStage(memory_.data() + 4000, 3000, "block d");
  ASSERT_TRUE(fits.ok());
  EXPECT_TRUE(fits->pinned());
  EXPECT_TRUE(fits->refusal().ok());
}

TEST_F(MasterPinningTest, AlwaysRefusesWhatCannotBePinnedSayingWhy) {
  MasterPinning pinning(PinningPolicy::kAlways, /*max_pinned_bytes=*/5000, &device());
  auto over_device = pinning.PinOrStage(memory_.data(), 4000, "block e");
  EXPECT_TRUE(absl::IsResourceExhausted(over_device.status())) << over_device.status();
  EXPECT_NE(over_device.status().message().find("pinning the 4000 bytes of block e on HOST-0"),
            absl::string_view::npos)
      << over_device.status();
  EXPECT_EQ(pinning.pinned_bytes(), 0u);
  auto over_budget = pinning.PinOrStage(memory_.data(), 6000, "block f");
  EXPECT_TRUE(absl::IsResourceExhausted(over_budget.status())) << over_budget.status();
  EXPECT_NE(over_budget.status().message().find("max_pinned_bytes"), absl::string_view::npos)
      << over_budget.status();
  auto fits = pinning.PinOrStage(memory_.data(), 2000, "block g");
  ASSERT_TRUE(fits.ok());
  EXPECT_TRUE(fits->pinned());
}

TEST_F(MasterPinningTest, NeverStagesEverything) {
  MasterPinning pinning(PinningPolicy::kNever, /*max_pinned_bytes=*/0, &device());
  auto staged = pinning.PinOrStage(memory_.data(), 100, "block h");
  ASSERT_TRUE(staged.ok());
  EXPECT_TRUE(staged->staged());
  EXPECT_FALSE(staged->pinned());
}

TEST(MasterPinningWithoutDevice, HoldsMastersNeitherPinnedNorStaged) {
  MasterPinning pinning(PinningPolicy::kNever, 0, nullptr);
  std::vector<std::byte> memory(10);
  auto residency = pinning.PinOrStage(memory.data(), 10, "block i");
  ASSERT_TRUE(residency.ok());
  EXPECT_FALSE(residency->pinned());
  EXPECT_FALSE(residency->staged());
}

}  // namespace
}  // namespace blockswap::daemon
