#include "daemon/device/ring_table.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "daemon/budget/ledger.h"
#include "shared/base/unique_fd.h"

namespace blockswap::daemon {
namespace {

// The table never looks into a ring's memory or producer: a ServedRing
// with only its id (and a charge, where a test follows it) stands for one.
std::unique_ptr<ServedRing> Ring(uint64_t ring_id) {
  auto ring = std::make_unique<ServedRing>();
  ring->ring_id = ring_id;
  return ring;
}

// A descriptor that polls as a live process's pidfd until `Exit`: the read
// end of a pipe, readable (hung up) once its write end is closed.
struct FakeOwner {
  FakeOwner() {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    pidfd = std::make_shared<const UniqueFd>(fds[0]);
    write_end = UniqueFd(fds[1]);
  }
  void Exit() { write_end.Reset(); }
  std::shared_ptr<const UniqueFd> pidfd;
  UniqueFd write_end;
};

bool NoneInFlight(const ServedRing&) { return false; }
void Ignore(const ServedRing&, RetireReason) {}

std::vector<uint64_t> RetiredIds(const RingTable& table) {
  std::vector<uint64_t> ids;
  table.ForEachRetired([&](const ServedRing& ring) { ids.push_back(ring.ring_id); });
  return ids;
}

TEST(RingTableTest, FindsLiveRingsById) {
  RingTable table;
  table.Add(Ring(1));
  table.Add(Ring(2));
  ASSERT_NE(table.Find(1), nullptr);
  EXPECT_EQ(table.Find(1)->ring_id, 1u);
  EXPECT_EQ(table.Find(2)->ring_id, 2u);
  EXPECT_EQ(table.Find(3), nullptr);
  EXPECT_EQ(table.live().size(), 2u);
}

TEST(RingTableTest, ARetiredRingIsNoLongerServed) {
  RingTable table;
  table.Add(Ring(1));
  EXPECT_TRUE(table.Retire(1, RetireReason::kClosedByClient, nullptr));
  EXPECT_EQ(table.Find(1), nullptr);
  EXPECT_TRUE(table.live().empty());
  EXPECT_EQ(RetiredIds(table), (std::vector<uint64_t>{1}));
  // Once only.
  EXPECT_FALSE(table.Retire(1, RetireReason::kClosedByClient, nullptr));
  EXPECT_FALSE(table.Retire(9, RetireReason::kOwnerExited, nullptr));
}

TEST(RingTableTest, FreesARetiredRingOnceNoCopyIsInFlight) {
  RingTable table;
  table.Add(Ring(1));
  table.Add(Ring(2));
  ASSERT_TRUE(table.Retire(1, RetireReason::kClosedByClient, nullptr));
  ASSERT_TRUE(table.Retire(2, RetireReason::kOwnerExited, nullptr));
  bool ring_2_busy = true;
  std::vector<std::pair<uint64_t, RetireReason>> freed;
  auto in_flight = [&](const ServedRing& ring) { return ring.ring_id == 2 && ring_2_busy; };
  auto record = [&](const ServedRing& ring, RetireReason reason) {
    freed.emplace_back(ring.ring_id, reason);
  };
  EXPECT_TRUE(table.FreeRetired(in_flight, record));  // ring 2 waits for its copies
  EXPECT_EQ(freed,
            (std::vector<std::pair<uint64_t, RetireReason>>{{1, RetireReason::kClosedByClient}}));
  EXPECT_FALSE(table.idle());
  ring_2_busy = false;
  EXPECT_FALSE(table.FreeRetired(in_flight, record));
  ASSERT_EQ(freed.size(), 2u);
  EXPECT_EQ(freed[1], std::make_pair(uint64_t{2}, RetireReason::kOwnerExited));
  EXPECT_TRUE(RetiredIds(table).empty());
  EXPECT_TRUE(table.idle());
}

TEST(RingTableTest, FreeingARingReturnsItsCharges) {
  Ledger ledger("uid 1000", "bytes");
  RingTable table;
  std::unique_ptr<ServedRing> ring = Ring(1);
  absl::StatusOr<Charge> charge = ledger.Reserve(4096, {"max_ring_bytes", 0});
  ASSERT_TRUE(charge.ok()) << charge.status();
  ring->charged.Add(*std::move(charge));
  table.Add(std::move(ring));
  ASSERT_TRUE(table.Retire(1, RetireReason::kClosedByClient, nullptr));
  EXPECT_EQ(ledger.used(), 4096u);  // retired, not yet freed
  EXPECT_FALSE(table.FreeRetired(NoneInFlight, Ignore));
  EXPECT_EQ(ledger.used(), 0u);
}

TEST(RingTableTest, HoldsARingForALiveDetachedOwnerUntilItExits) {
  FakeOwner owner;
  RingTable table;
  table.Add(Ring(1));
  ASSERT_TRUE(table.Retire(1, RetireReason::kOwnerDetached, owner.pidfd));
  std::vector<RetireReason> freed;
  auto record = [&](const ServedRing&, RetireReason reason) { freed.push_back(reason); };
  // Held, not waiting for the device: the worker need not poll for it.
  EXPECT_FALSE(table.FreeRetired(NoneInFlight, record));
  EXPECT_TRUE(freed.empty());
  EXPECT_TRUE(table.idle());
  owner.Exit();
  EXPECT_FALSE(table.idle());  // now only its copies keep it
  EXPECT_FALSE(table.FreeRetired(NoneInFlight, record));
  EXPECT_EQ(freed, std::vector<RetireReason>{RetireReason::kOwnerExited});
}

TEST(RingTableTest, ADetachedRingWithoutAnOwnerIsFreedAsAnExitedOnes) {
  RingTable table;
  table.Add(Ring(1));
  ASSERT_TRUE(table.Retire(1, RetireReason::kOwnerDetached, nullptr));
  std::vector<RetireReason> freed;
  EXPECT_FALSE(table.FreeRetired(
      NoneInFlight, [&](const ServedRing&, RetireReason reason) { freed.push_back(reason); }));
  EXPECT_EQ(freed, std::vector<RetireReason>{RetireReason::kOwnerExited});
}

TEST(RingTableTest, ReleaseForExitFreesOnlyWhatNoLiveProcessMaps) {
  Ledger ledger("uid 1000", "bytes");
  auto charged = [&](uint64_t ring_id) {
    std::unique_ptr<ServedRing> ring = Ring(ring_id);
    absl::StatusOr<Charge> charge = ledger.Reserve(1, {"max_ring_bytes", 0});
    EXPECT_TRUE(charge.ok()) << charge.status();
    ring->charged.Add(*std::move(charge));
    return ring;
  };
  FakeOwner owner;
  RingTable table;
  table.Add(charged(1));  // live: its client may map it
  table.Add(charged(2));  // held for a live owner
  table.Add(charged(3));  // closed by its client
  ASSERT_TRUE(table.Retire(2, RetireReason::kOwnerDetached, owner.pidfd));
  ASSERT_TRUE(table.Retire(3, RetireReason::kClosedByClient, nullptr));
  ASSERT_EQ(ledger.used(), 3u);
  table.ReleaseForExit();
  EXPECT_TRUE(table.live().empty());
  EXPECT_TRUE(RetiredIds(table).empty());
  // Ring 3 was freed; rings 1 and 2 are left, charges and all, to the exit.
  EXPECT_EQ(ledger.used(), 2u);
}

}  // namespace
}  // namespace blockswap::daemon
