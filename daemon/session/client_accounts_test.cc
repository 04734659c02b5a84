#include "daemon/session/client_accounts.h"

#include <gtest/gtest.h>

#include "absl/status/status.h"

namespace blockswap::daemon {
namespace {

TEST(ClientAccounts, ZeroMeansUnlimited) {
  ClientAccounts accounts;
  auto huge = accounts.Reserve(1000, 42, {.rings = 1000, .device_bytes = uint64_t{1} << 50}, {});
  EXPECT_TRUE(huge.ok());
}

TEST(ClientAccounts, TheProcessQuotaNamesTheProcessTheKeyAndTheNumbers) {
  ClientAccounts accounts;
  ClientQuotas quotas{.per_client = {.rings = 2}};
  auto two = accounts.Reserve(1000, 42, {.rings = 2}, quotas);
  ASSERT_TRUE(two.ok());
  auto third = accounts.Reserve(1000, 42, {.rings = 1}, quotas);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(third.status().message(),
            "process 42 (uid 1000) would hold 3 rings (2 held + 1 asked), over "
            "max_rings_per_client = 2");
  EXPECT_TRUE(accounts.Reserve(1000, 43, {.rings = 1}, quotas).ok()) << "another process";
}

TEST(ClientAccounts, TheUidQuotaCountsEveryProcessOfTheUid) {
  ClientAccounts accounts;
  ClientQuotas quotas{.per_uid = {.staging_bytes = 1000}};
  auto first = accounts.Reserve(7, 1, {.staging_bytes = 600}, quotas);
  ASSERT_TRUE(first.ok());
  auto second = accounts.Reserve(7, 2, {.staging_bytes = 401}, quotas);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(second.status().message(),
            "uid 7 would hold 1001 bytes of staging memory (600 held + 401 asked), over "
            "max_staging_bytes_per_uid = 1000");
  EXPECT_TRUE(accounts.Reserve(8, 2, {.staging_bytes = 1000}, quotas).ok()) << "another uid";
}

TEST(ClientAccounts, ARefusalChargesNothingAndADroppedReservationReturnsEverything) {
  ClientAccounts accounts;
  ClientQuotas quotas{.per_client = {.device_bytes = 100}};
  auto refused = accounts.Reserve(1, 5, {.rings = 1, .device_bytes = 101}, quotas);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(accounts.HeldByProcess(5).rings, 0u) << "the ring count taken first was kept";
  EXPECT_EQ(accounts.HeldByUid(1).rings, 0u);
  {
    auto ring = accounts.Reserve(1, 5, {.rings = 1, .device_bytes = 100}, quotas);
    ASSERT_TRUE(ring.ok());
    EXPECT_EQ(accounts.HeldByProcess(5).device_bytes, 100u);
    EXPECT_EQ(accounts.HeldByUid(1).rings, 1u);
  }
  EXPECT_EQ(accounts.HeldByProcess(5).device_bytes, 0u);
  EXPECT_EQ(accounts.HeldByUid(1).rings, 0u);
}

TEST(ClientAccounts, IdleAccountsAreDroppedAndHeldOnesKept) {
  ClientAccounts accounts;
  auto kept = accounts.Reserve(1, 1, {.sessions = 1}, {});
  ASSERT_TRUE(kept.ok());
  for (pid_t pid = 2; pid < 1000; ++pid) (void)accounts.Reserve(1, pid, {.sessions = 1}, {});
  EXPECT_EQ(accounts.HeldByProcess(1).sessions, 1u);
  EXPECT_EQ(accounts.HeldByUid(1).sessions, 1u);
}

}  // namespace
}  // namespace blockswap::daemon
