// MasterRoom: which limit a model is short of, in order, what eviction
// would free counted as room, and refusals that withhold the node's totals
// when asked to. The tmpfs is a real directory (MasterFiles).
#include "daemon/store/master_room.h"

#include <memory>
#include <string>

#include "daemon/store/scratch_masters_test.h"
#include "gtest/gtest.h"

namespace blockswap::daemon {
namespace {

using MasterRoomTest = ScratchMastersTest;

TEST_F(MasterRoomTest, TheFirstLimitThatIsShortIsNamedAndEvictionCountsAsRoom) {
  MemoryBudget budget(1 << 20);
  const MasterRoom room({.pinning = PinningPolicy::kAlways,
                         .max_pinned_bytes = 64 << 10,
                         .memory_budget = &budget,
                         .max_blocks = 4},
                        files_.get());
  EvictionReason short_of = EvictionReason::kOperator;
  const BlockTotals held = {.bytes = 48 << 10, .blocks = 3};
  EXPECT_TRUE(room.Fits(16 << 10, 1, held, {}, &short_of).ok());

  absl::Status pinned = room.Fits(32 << 10, 1, held, {}, &short_of);
  EXPECT_EQ(pinned.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(short_of, EvictionReason::kMaxPinnedBytes);
  EXPECT_NE(pinned.message().find("--max-pinned-bytes=65536 (49152 already pinned)"),
            std::string::npos)
      << pinned;
  EXPECT_TRUE(room.Fits(32 << 10, 1, held, {.bytes = 16 << 10, .blocks = 1}, &short_of).ok())
      << "what eviction would free was not counted as room";

  absl::Status blocks = room.Fits(4 << 10, 2, held, {}, &short_of);
  EXPECT_EQ(short_of, EvictionReason::kMaxMasterBlocks) << blocks;
  EXPECT_NE(blocks.message().find("max_master_blocks = 4"), std::string::npos) << blocks;

  absl::Status memory = room.Fits(2 << 20, 1, {}, {}, &short_of);
  EXPECT_EQ(short_of, EvictionReason::kMaxPinnedBytes) << "pinned bytes are checked first";
  const MasterRoom unpinned({.pinning = PinningPolicy::kAuto, .memory_budget = &budget},
                            files_.get());
  memory = unpinned.Fits(2 << 20, 1, {}, {}, &short_of);
  EXPECT_EQ(memory.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(short_of, EvictionReason::kMaxMemoryBytes) << memory;
}

TEST_F(MasterRoomTest, AModelLargerThanTheTmpfsIsShortOfTheTmpfs) {
  const MasterRoom room({.pinning = PinningPolicy::kAuto}, files_.get());
  auto free_bytes = files_->FreeBytes();
  ASSERT_TRUE(free_bytes.ok()) << free_bytes.status();
  EvictionReason short_of = EvictionReason::kOperator;
  absl::Status fits = room.Fits(*free_bytes + (1 << 30), 1, {}, {}, &short_of);
  EXPECT_EQ(fits.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(short_of, EvictionReason::kTmpfs);
  EXPECT_NE(fits.message().find(path_), std::string::npos) << fits;
}

TEST_F(MasterRoomTest, WithheldTotalsShowNeitherWhatIsHeldNorWhatEvictionWouldFree) {
  const MasterRoom room({.pinning = PinningPolicy::kAlways,
                         .max_pinned_bytes = 64 << 10,
                         .totals_withheld = "model_access = registrant-group"},
                        files_.get());
  EvictionReason short_of = EvictionReason::kOperator;
  absl::Status refused = room.Fits(32 << 10, 1, {.bytes = 48 << 10, .blocks = 3},
                                   {.bytes = 4 << 10, .blocks = 1}, &short_of);
  ASSERT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message().find("49152"), std::string::npos) << refused;
  EXPECT_EQ(refused.message().find("evicting"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("not shown under model_access = registrant-group"),
            std::string::npos)
      << refused;
}

TEST_F(MasterRoomTest, AChargeIsTheBlocksBytesAndItsOverhead) {
  MemoryBudget budget(1 << 20);
  const MasterRoom room({.memory_budget = &budget}, files_.get());
  auto charge = room.Charge(8192, "m");
  ASSERT_TRUE(charge.ok()) << charge.status();
  EXPECT_EQ(budget.used(MemoryUse::kMasters), 8192 + kBlockOverheadBytes);
  const MasterRoom unbudgeted({}, files_.get());
  EXPECT_TRUE(unbudgeted.Charge(8192, "m").ok());
}

}  // namespace
}  // namespace blockswap::daemon
