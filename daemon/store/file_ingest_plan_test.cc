#include "daemon/store/file_ingest_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/safetensors_writer.h"

namespace blockswap::daemon {
namespace {

using ::testing::HasSubstr;

SafetensorsHeader HeaderOf(const std::vector<testing::WriterTensor>& tensors) {
  auto file = testing::SafetensorsFileBytes(tensors, 3);
  EXPECT_TRUE(file.ok()) << file.status();
  auto header = ParseSafetensorsPrefix(*file, file->size());
  EXPECT_TRUE(header.ok()) << header.status();
  return *header;
}

absl::StatusOr<IngestPlan> Plan(const std::vector<testing::WriterTensor>& tensors,
                                IngestSpec spec) {
  return PlanIngest({HeaderOf(tensors)}, {"model.safetensors"}, spec);
}

const IngestSpec kBlocks{.block_pattern = R"(^transformer_blocks\.(\d+)\.)"};

TEST(PlanIngest, GroupsTensorsIntoBlocksByTheCapturedIndex) {
  // Written with block 10 before block 2, as a name-sorted file would be.
  std::vector<testing::WriterTensor> tensors;
  for (int b : {0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9}) {
    tensors.push_back({"transformer_blocks." + std::to_string(b) + ".w", "F16", {4, 2}});
    tensors.push_back({"transformer_blocks." + std::to_string(b) + ".b", "F16", {2}});
  }
  auto plan = Plan(tensors, kBlocks);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->layout.blocks.size(), 12u);
  for (const BlockSpec& block : plan->layout.blocks) {
    ASSERT_EQ(block.tensors.size(), 2u);
    EXPECT_EQ(block.tensors[0].name, "w");  // file order within the block
    EXPECT_EQ(block.tensors[1].name, "b");
    EXPECT_EQ(block.tensors[1].offset, 256u);
  }
  // Block 2's bytes come after block 11's in the file.
  EXPECT_GT(plan->sources[2][0].file_offset, plan->sources[11][1].file_offset);
  EXPECT_EQ(plan->sources[2][0].bytes, 16u);
  EXPECT_TRUE(plan->extras.blocks.empty());
}

TEST(PlanIngest, UnselectedAndOutsideTensorsAreExtrasUnderFullNames) {
  auto plan = Plan(testing::TransformerTensors(2, 1, 4),
                   IngestSpec{.block_pattern = kBlocks.block_pattern, .select = R"(\.weight$)"});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->layout.blocks.size(), 2u);
  EXPECT_EQ(plan->layout.blocks[1].tensors.size(), 1u);
  EXPECT_EQ(plan->layout.blocks[1].tensors[0].name, "attn.w0.weight");
  ASSERT_EQ(plan->extras.blocks.size(), 1u);
  std::vector<std::string> extras;
  for (const TensorSpec& t : plan->extras.blocks[0].tensors) extras.push_back(t.name);
  EXPECT_EQ(extras, (std::vector<std::string>{"embed.weight", "transformer_blocks.0.attn.w0.bias",
                                              "transformer_blocks.1.attn.w0.bias",
                                              "norm_out.scale"}));
}

TEST(PlanIngest, SelectRankKeepsOnlyTensorsOfThatRank) {
  auto plan = Plan(testing::TransformerTensors(2, 2, 4),
                   IngestSpec{.block_pattern = kBlocks.block_pattern, .select_rank = 1});
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const BlockSpec& block : plan->layout.blocks) {
    for (const TensorSpec& t : block.tensors) EXPECT_EQ(t.shape.size(), 1u) << t.name;
  }
}

TEST(PlanIngest, APatternThatMatchesNothingIsNotFound) {
  auto plan = Plan(testing::TransformerTensors(2, 1, 4), IngestSpec{.block_pattern = R"(^x\.(\d+)\.)"});
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kNotFound) << plan.status();
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("matches none of the 6 tensors of model.safetensors"));
  auto none = Plan(testing::TransformerTensors(2, 1, 4),
                   IngestSpec{.block_pattern = kBlocks.block_pattern, .select = "nothing"});
  ASSERT_EQ(none.status().code(), absl::StatusCode::kNotFound) << none.status();
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("leaves none of the 4 tensors"));
}

TEST(PlanIngest, RefusesBadPatternsAndGaps) {
  auto tensors = testing::TransformerTensors(3, 1, 4);
  EXPECT_THAT(std::string(Plan(tensors, {.block_pattern = "^transformer_blocks"}).status().message()),
              HasSubstr("has 0 capture groups; it needs exactly one"));
  EXPECT_THAT(std::string(Plan(tensors, {.block_pattern = "(("}).status().message()),
              HasSubstr("is not a valid regex"));
  EXPECT_THAT(std::string(Plan(tensors, {.block_pattern = R"(^(transformer)_blocks)"})
                              .status()
                              .message()),
              HasSubstr("captures 'transformer'"));
  EXPECT_THAT(std::string(Plan(tensors, {.block_pattern = R"(^transformer_blocks\.(\d+)\.attn\.w0\.bias$)"})
                              .status()
                              .message()),
              HasSubstr("leaving no name relative to block 0"));
  auto gap = Plan(tensors, {.block_pattern = R"(^transformer_blocks\.([02])\.)"});
  EXPECT_EQ(gap.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(gap.status().message()),
              HasSubstr("block 1 has no selected tensor (next: 2)"));
}

TEST(PlanIngest, ATensorInTwoShardsIsRefused) {
  SafetensorsHeader a = HeaderOf({{"transformer_blocks.0.w", "U8", {4}}});
  auto plan = PlanIngest({a, a}, {"a.safetensors", "b.safetensors"}, kBlocks);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("appears in two shards"));
}

}  // namespace
}  // namespace blockswap::daemon
