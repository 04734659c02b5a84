#include "daemon/session/quota.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace blockswap::daemon {
namespace {

TEST(Quota, ZeroMeansUnlimited) {
  ClientUsage huge{1000, uint64_t{1} << 50, uint64_t{1} << 50};
  EXPECT_TRUE(CheckNewRing({}, 1, huge, uint64_t{1} << 40).ok());
  EXPECT_TRUE(CheckNewUpload({}, 1, huge, uint64_t{1} << 40).ok());
}

TEST(Quota, RingCountOverTheQuotaNamesTheKeyAndTheNumbers) {
  ClientQuotas quotas{.max_rings = 2};
  EXPECT_TRUE(CheckNewRing(quotas, 3, {.rings = 1}, 10).ok());
  absl::Status s = CheckNewRing(quotas, 3, {.rings = 2}, 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "session 3 would hold 3 rings, over the quota max_rings_per_client = 2");
}

TEST(Quota, DeviceBytesCountWhatIsHeldAndWhatIsAsked) {
  ClientQuotas quotas{.max_device_bytes = 1000};
  EXPECT_TRUE(CheckNewRing(quotas, 1, {.rings = 1, .device_bytes = 600}, 400).ok());
  absl::Status s = CheckNewRing(quotas, 1, {.rings = 1, .device_bytes = 600}, 401);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(s.message(), "1001 bytes of ring memory (600 held + 401 asked)"))
      << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "max_device_bytes_per_client = 1000")) << s;
}

TEST(Quota, StagingBytesCountOpenUploads) {
  ClientQuotas quotas{.max_staging_bytes = 4096};
  EXPECT_TRUE(CheckNewUpload(quotas, 1, {.staging_bytes = 0}, 4096).ok());
  absl::Status s = CheckNewUpload(quotas, 1, {.staging_bytes = 4096}, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(s.message(), "max_staging_bytes_per_client = 4096")) << s;
}

TEST(Quota, PolicyChangesApplyToTheNextCheck) {
  QuotaPolicy policy;
  EXPECT_TRUE(CheckNewRing(policy.Get(), 1, {.rings = 5}, 1).ok());
  policy.Set({.max_rings = 5});
  EXPECT_FALSE(CheckNewRing(policy.Get(), 1, {.rings = 5}, 1).ok());
}

}  // namespace
}  // namespace blockswap::daemon
