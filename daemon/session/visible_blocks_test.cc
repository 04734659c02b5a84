#include "daemon/session/visible_blocks.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/support/test_model.h"

namespace blockswap::daemon {
namespace {

using ::blockswap::testing::MakeModel;
using ::blockswap::testing::TestModel;

constexpr uid_t kAlice = 1000;
constexpr uid_t kBob = 2000;
constexpr uid_t kDaemonUid = 990;

Peer Viewer(uid_t uid) {
  Peer peer;
  peer.uid = uid;
  peer.gid = uid;
  peer.allowed = true;
  return peer;
}

// A store under /dev/shm holding one model of two blocks that Alice registered.
class VisibleBlocksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = absl::StrCat("/dev/shm/blockswap-visible-blocks-test-", ::getpid());
    std::filesystem::remove_all(directory_);
    auto store = ModelStore::Open(
        ModelStoreOptions{.directory = directory_, .max_pinned_bytes = 16 << 20}, nullptr);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(store).value();
    auto registered =
        store_->Register("alices", model_.layout, model_.content.data(), model_.content.size(),
                         Registrant{.uid = kAlice, .gid = kAlice});
    ASSERT_TRUE(registered.ok()) << registered.status();
    registered_ = registered->model;
  }
  void TearDown() override {
    registered_.reset();
    store_.reset();
    std::filesystem::remove_all(directory_);
  }

  // A claim that block `b` of the model is held.
  HeldBlockClaim Claim(uint32_t b) const {
    return {b, Sha256Of(model_.block(b), model_.layout.blocks[b].bytes)};
  }

  const TestModel model_ = MakeModel(1, 2);
  std::string directory_;
  std::unique_ptr<ModelStore> store_;
  std::shared_ptr<const Model> registered_;
};

TEST_F(VisibleBlocksTest, HoldsEveryBlockOfAModelThePeerMaySee) {
  VisibleBlocks visible = VisibleBlocks::Of(
      *store_, ModelVisibility(ModelAccess::kAllowedUsers, kDaemonUid), Viewer(kBob));
  EXPECT_TRUE(visible.contains(registered_->block_master(0)->id()));
  EXPECT_TRUE(visible.contains(registered_->block_master(1)->id()));
  EXPECT_FALSE(visible.contains(std::string(64, '0')));
}

TEST_F(VisibleBlocksTest, HoldsNothingOfAModelThePeerMayNotSee) {
  const ModelVisibility visibility(ModelAccess::kRegistrantGroup, kDaemonUid);
  EXPECT_FALSE(VisibleBlocks::Of(*store_, visibility, Viewer(kBob))
                   .contains(registered_->block_master(0)->id()));
  EXPECT_TRUE(VisibleBlocks::Of(*store_, visibility, Viewer(kAlice))
                  .contains(registered_->block_master(0)->id()));
}

TEST_F(VisibleBlocksTest, ResolvesClaimsToTheirMastersByPosition) {
  VisibleBlocks visible = VisibleBlocks::Of(*store_, ModelVisibility(), Viewer(kAlice));
  absl::StatusOr<KnownBlocks> known = visible.Resolve({Claim(1)}, model_.layout);
  ASSERT_TRUE(known.ok()) << known.status();
  ASSERT_EQ(known->masters.size(), 2u);
  ASSERT_EQ(known->hashes.size(), 2u);
  EXPECT_EQ(known->masters[0], nullptr);
  EXPECT_EQ(known->masters[1], registered_->block_master(1));
  EXPECT_EQ(known->hashes[1], Claim(1).hash);
}

TEST_F(VisibleBlocksTest, NoClaimsResolveToNothingKnownEvenWithNoBlocks) {
  absl::StatusOr<KnownBlocks> known = VisibleBlocks().Resolve({}, model_.layout);
  ASSERT_TRUE(known.ok()) << known.status();
  EXPECT_EQ(known->masters, (std::vector<std::shared_ptr<const BlockMaster>>(2)));
}

TEST_F(VisibleBlocksTest, AClaimOfABlockNotVisibleIsRefusedAlikeWhetherHeldOrNot) {
  VisibleBlocks visible = VisibleBlocks::Of(
      *store_, ModelVisibility(ModelAccess::kRegistrantGroup, kDaemonUid), Viewer(kBob));
  HeldBlockClaim unknown = Claim(0);
  unknown.hash[0] ^= 1;
  for (const HeldBlockClaim& claim : {Claim(0), unknown}) {
    absl::StatusOr<KnownBlocks> known = visible.Resolve({claim}, model_.layout);
    ASSERT_EQ(known.status().code(), absl::StatusCode::kFailedPrecondition) << known.status();
    EXPECT_NE(known.status().message().find("held block 0 (block id "), absl::string_view::npos);
    EXPECT_NE(
        known.status().message().find("is not held by this blockswapd in a model you may see"),
        absl::string_view::npos);
  }
}

}  // namespace
}  // namespace blockswap::daemon
