// BlockTable's counts: what a claim takes, when a block's file goes, what
// eviction could free. Its masters are real block files (MasterFiles) on a
// tmpfs, never mapped.
#include "daemon/store/block_table.h"

#include <memory>
#include <string>
#include <vector>

#include "daemon/store/master_files.h"
#include "daemon/store/scratch_masters_test.h"
#include "gtest/gtest.h"

namespace blockswap::daemon {
namespace {

class BlockTableTest : public ScratchMastersTest {
 protected:
  // A master of `id` of `bytes` bytes (one page of file).
  std::shared_ptr<const BlockMaster> Master(const std::string& id, uint64_t bytes = 100) {
    auto block = files_->CreateBlock(id, bytes, id + ".tmp", /*allocate=*/false);
    EXPECT_TRUE(block.ok()) << block.status();
    return block.ok() ? std::shared_ptr<const BlockMaster>(std::move(block).value()) : nullptr;
  }

  BlockTable table_;
};

TEST_F(BlockTableTest, AClaimSharesTheHeldBlocksAndTakesEachMissingOneOnce) {
  table_.AddWritten(Master("held"));
  const std::vector<std::string> ids = {"held", "new", "new", "held"};
  ASSERT_FALSE(table_.Busy(ids));
  const BlockClaim claim = table_.Claim(ids, {100, 5000, 5000, 100});
  ASSERT_EQ(claim.held.size(), 4u);
  EXPECT_EQ(claim.held[0], table_.Find("held"));
  EXPECT_EQ(claim.held[1], nullptr);
  EXPECT_EQ(claim.held[3], table_.Find("held"));
  EXPECT_EQ(claim.claimed, std::vector<std::string>{"new"});
  EXPECT_EQ(claim.claimed_positions, std::vector<size_t>{1});
  EXPECT_EQ(claim.held_ids, std::vector<std::string>{"held"});
  EXPECT_EQ(claim.missing_bytes, BlockFileBytes(5000));
  EXPECT_TRUE(table_.Busy({"new"})) << "a block being written was free to claim again";
  EXPECT_FALSE(table_.Busy({"held"}));
  EXPECT_TRUE(table_.EndClaim(claim, /*published=*/false).empty());
  EXPECT_FALSE(table_.Busy({"new"}));
  EXPECT_EQ(table_.size(), 1u);
}

TEST_F(BlockTableTest, ABlockGoesWithItsLastModelAndItsLastClaim) {
  table_.AddWritten(Master("b"));
  const uint64_t file_bytes = table_.bytes();
  EXPECT_EQ(file_bytes, BlockFileBytes(100));
  const BlockClaim claim = table_.Claim({"b"}, {100});
  EXPECT_FALSE(table_.ReleaseNamed("b")) << "a claimed block went with its model";
  EXPECT_EQ(table_.size(), 1u);
  EXPECT_EQ(table_.EndClaim(claim, /*published=*/false), std::vector<std::string>{"b"});
  EXPECT_EQ(table_.size(), 0u);
  EXPECT_EQ(table_.bytes(), 0u);
  EXPECT_EQ(table_.Find("b"), nullptr);
}

TEST_F(BlockTableTest, APublishedClaimIsOneMoreModelNamingTheBlock) {
  table_.AddWritten(Master("b"));
  table_.EndClaim(table_.Claim({"b"}, {100}), /*published=*/true);
  EXPECT_FALSE(table_.ReleaseNamed("b"));
  EXPECT_TRUE(table_.ReleaseNamed("b"));
  EXPECT_EQ(table_.size(), 0u);
}

TEST_F(BlockTableTest, EvictionFreesOnlyBlocksNoModelInUseNamesAndNoClaimHolds) {
  std::shared_ptr<const BlockMaster> in_use = Master("in-use");
  table_.AddWritten(in_use);
  table_.AddWritten(Master("idle", 5000));
  table_.AddWritten(Master("claimed"));
  const BlockClaim claim = table_.Claim({"claimed"}, {100});
  const BlockTotals freeable = table_.FreeableBeside({in_use.get()});
  EXPECT_EQ(freeable.blocks, 1u);
  EXPECT_EQ(freeable.bytes, BlockFileBytes(5000));
  table_.EndClaim(claim, /*published=*/false);
  EXPECT_EQ(table_.FreeableBeside({in_use.get()}).blocks, 2u);
}

TEST_F(BlockTableTest, ReservedRoomCountsUntilItIsReturned) {
  table_.AddWritten(Master("b"));
  table_.Reserve(8192, 2);
  EXPECT_EQ(table_.committed().bytes, BlockFileBytes(100) + 8192);
  EXPECT_EQ(table_.committed().blocks, 3u);
  table_.Unreserve(8192, 2);
  EXPECT_EQ(table_.committed().bytes, table_.bytes());
  EXPECT_EQ(table_.committed().blocks, 1u);
}

}  // namespace
}  // namespace blockswap::daemon
