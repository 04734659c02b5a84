#include "daemon/budget/ledger.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace blockswap::daemon {
namespace {

TEST(Ledger, AReservationOverTheLimitNamesHolderKeyAndNumbersAndAddsNothing) {
  Ledger rings("uid 1000", "rings");
  auto first = rings.Reserve(2, {"max_rings_per_uid", 2});
  ASSERT_TRUE(first.ok());
  auto refused = rings.Reserve(1, {"max_rings_per_uid", 2});
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(),
            "uid 1000 would hold 3 rings (2 held + 1 asked), over max_rings_per_uid = 2");
  EXPECT_EQ(rings.used(), 2u);
}

TEST(Ledger, AChargeReturnsItsAmountWhenDestroyedOrMovedOver) {
  Ledger bytes("blockswapd", "bytes");
  {
    auto a = bytes.Reserve(100, {"k", 0});
    ASSERT_TRUE(a.ok());
    Charge moved = *std::move(a);
    EXPECT_EQ(bytes.used(), 100u);
    auto b = bytes.Reserve(50, {"k", 0});
    moved = *std::move(b);  // gives the 100 back, holds the 50
    EXPECT_EQ(bytes.used(), 50u);
  }
  EXPECT_EQ(bytes.used(), 0u);
}

TEST(Ledger, ZeroIsUnlimitedAndAnAmountLargerThanTheLimitDoesNotWrap) {
  Ledger bytes("blockswapd", "bytes");
  EXPECT_TRUE(bytes.Reserve(uint64_t{1} << 62, {"k", 0}).ok());
  Ledger small("p", "bytes");
  EXPECT_FALSE(small.Reserve(UINT64_MAX, {"k", 10}).ok());
  EXPECT_FALSE(small.Check(11, {"k", 10}).ok());
  EXPECT_TRUE(small.Check(10, {"k", 10}).ok());
}

TEST(Ledger, ConcurrentReservationsNeverTogetherPassTheLimit) {
  Ledger rings("uid 7", "rings");
  std::vector<std::thread> threads;
  std::vector<Charge> kept[8];
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        auto charge = rings.Reserve(1, {"max", 100});
        if (charge.ok()) kept[t].push_back(*std::move(charge));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  size_t held = 0;
  for (auto& k : kept) held += k.size();
  EXPECT_EQ(held, 100u);
  EXPECT_EQ(rings.used(), 100u);
}

TEST(Ledger, AChargeMayOutliveItsLedgerAndAReservationReturnsEverything) {
  Reservation reservation;
  {
    Ledger a("a", "x"), b("b", "x");
    reservation.Add(*a.Reserve(3, {}));
    reservation.Add(*b.Reserve(4, {}));
    EXPECT_EQ(a.used() + b.used(), 7u);
    Reservation other;
    other.Add(*a.Reserve(1, {}));
    reservation.Add(std::move(other));
    EXPECT_EQ(a.used(), 4u);
    reservation.Release();
    EXPECT_EQ(a.used() + b.used(), 0u);
    reservation.Add(*a.Reserve(5, {}));
  }
  reservation.Release();  // the ledger is gone: returning to it must be safe
  EXPECT_TRUE(reservation.empty());
}

}  // namespace
}  // namespace blockswap::daemon
