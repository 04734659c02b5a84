#include "shared/base/safetensors_index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace blockswap {
namespace {

using ::testing::HasSubstr;

// The message of a refused index (INVALID_ARGUMENT expected; an accepted
// one fails here, its status being OK).
std::string Refusal(absl::string_view json) {
  const absl::Status status = ParseSafetensorsIndex(json).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  return std::string(status.message());
}

TEST(SafetensorsIndexTest, ListsEachShardOnceSorted) {
  auto shards = ParseSafetensorsIndex(
      R"({"metadata":{},"weight_map":{"a":"m-2.safetensors","b":"m-1.safetensors",)"
      R"("c":"m-2.safetensors"}})");
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_EQ(*shards, (std::vector<std::string>{"m-1.safetensors", "m-2.safetensors"}));
}

TEST(SafetensorsIndexTest, RefusesAShardThatIsNotAPlainFileName) {
  EXPECT_THAT(Refusal(R"({"weight_map":{"a":"../x"}})"),
              HasSubstr("weight_map entry 'a' names shard '../x', not a plain file name"));
  EXPECT_THAT(Refusal(R"({"weight_map":{"a":".."}})"), HasSubstr("not a plain file name"));
  EXPECT_THAT(Refusal(R"({"weight_map":{"a":""}})"), HasSubstr("not a plain file name"));
}

TEST(SafetensorsIndexTest, RefusesAShardThatIsNoString) {
  EXPECT_THAT(Refusal(R"({"weight_map":{"a":3}})"),
              HasSubstr("weight_map entry 'a' is number, not a file name"));
}

TEST(SafetensorsIndexTest, RefusesAnIndexWithoutAWeightMap) {
  EXPECT_THAT(Refusal(R"({"metadata":{}})"), HasSubstr("has no weight_map object"));
  EXPECT_THAT(Refusal(R"({"weight_map":{}})"), HasSubstr("has no weight_map object"));
  EXPECT_THAT(Refusal("[]"), HasSubstr("has no weight_map object"));
}

TEST(SafetensorsIndexTest, RefusesTextThatIsNotJson) {
  EXPECT_THAT(Refusal(R"({"weight_map":)"), HasSubstr("the safetensors index is not valid JSON: "));
}

}  // namespace
}  // namespace blockswap
