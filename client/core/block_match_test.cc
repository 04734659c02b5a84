#include "client/core/block_match.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace blockswap::client {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kQ[] = {4, 8};
constexpr uint64_t kBias[] = {8};

BlockSpec Block() {
  return *PackBlock({TensorSpec{.name = "q.weight", .dtype = "BF16", .shape = {4, 8}},
                     TensorSpec{.name = "q.bias", .dtype = "F32", .shape = {8}}});
}

TEST(MatchBlockTest, GivesEachWantedTensorsOffsetInTheCallersOrder) {
  const BlockSpec block = Block();
  const WantedTensor wanted[] = {{"q.bias", "F32", kBias}, {"q.weight", "BF16", kQ}};
  auto offsets = MatchBlock(block, wanted, "block 0");
  ASSERT_TRUE(offsets.ok()) << offsets.status();
  EXPECT_EQ(*offsets, (std::vector<uint64_t>{block.tensors[1].offset, block.tensors[0].offset}));
}

TEST(MatchBlockTest, ATensorTheBlockLacksIsNotFoundListingWhatItHas) {
  const WantedTensor wanted[] = {{"k.weight", "BF16", kQ}};
  const absl::Status status = MatchBlock(Block(), wanted, "model m block 2").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("model m block 2: the selector streams 'k.weight', which the "
                                          "model's block does not have (it has 'q.weight', "
                                          "'q.bias')"));
}

TEST(MatchBlockTest, ADifferentDtypeOrShapeIsRefusedNamingBoth) {
  const WantedTensor dtype[] = {{"q.weight", "F16", kQ}, {"q.bias", "F32", kBias}};
  EXPECT_THAT(MatchBlock(Block(), dtype, "block 1").status().message(),
              HasSubstr("block 1 tensor 'q.weight': the model has dtype BF16, the module F16"));
  const WantedTensor shape[] = {{"q.weight", "BF16", kBias}, {"q.bias", "F32", kBias}};
  const absl::Status status = MatchBlock(Block(), shape, "block 1").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("the model has shape [4,8], the module [8]"));
}

TEST(MatchBlockTest, ATensorOfTheBlockNotStreamedIsRefused) {
  const WantedTensor wanted[] = {{"q.weight", "BF16", kQ}};
  const absl::Status status = MatchBlock(Block(), wanted, "block 1").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              HasSubstr("block 1 has tensor 'q.bias' that the selector does not stream in "
                        "the module"));
}

TEST(MatchBlockTest, ATensorWantedTwiceIsRefused) {
  const WantedTensor wanted[] = {{"q.weight", "BF16", kQ}, {"q.weight", "BF16", kQ}};
  EXPECT_THAT(MatchBlock(Block(), wanted, "block 1").status().message(),
              HasSubstr("tensor 'q.weight' is streamed twice (tensors 0 and 1)"));
}

}  // namespace
}  // namespace blockswap::client
