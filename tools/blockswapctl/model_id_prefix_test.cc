#include "tools/blockswapctl/model_id_prefix.h"

#include <gtest/gtest.h>

#include <string>

namespace blockswap::ctl {
namespace {

const std::string kFirst = "ab12" + std::string(60, '0');
const std::string kSecond = "ab34" + std::string(60, '1');
const std::string kThird = "cd56" + std::string(60, '2');

v1::ModelsReply ThreeModels() {
  v1::ModelsReply reply;
  for (const auto& [id, name] :
       {std::pair{kFirst, "first"}, std::pair{kSecond, "second"}, std::pair{kThird, ""}}) {
    v1::ModelInfo* model = reply.add_models();
    model->set_model_id(id);
    model->set_name(name);
  }
  return reply;
}

TEST(ExpandModelIdPrefixTest, AUniquePrefixIsTheWholeId) {
  absl::StatusOr<std::string> id = ExpandModelIdPrefix("ab1", ThreeModels());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, kFirst);
  EXPECT_EQ(*ExpandModelIdPrefix("c", ThreeModels()), kThird);
}

TEST(ExpandModelIdPrefixTest, TheWholeIdExpandsToItself) {
  EXPECT_EQ(*ExpandModelIdPrefix(kSecond, ThreeModels()), kSecond);
}

TEST(ExpandModelIdPrefixTest, UppercaseDigitsMatchTheLowercaseIds) {
  EXPECT_EQ(*ExpandModelIdPrefix("AB3", ThreeModels()), kSecond);
}

TEST(ExpandModelIdPrefixTest, AnAmbiguousPrefixNamesEveryCandidate) {
  absl::StatusOr<std::string> id = ExpandModelIdPrefix("ab", ThreeModels());
  ASSERT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << id.status();
  const std::string message(id.status().message());
  EXPECT_NE(message.find("'ab' matches 2 models"), std::string::npos) << message;
  EXPECT_NE(message.find(kFirst + " (first)"), std::string::npos) << message;
  EXPECT_NE(message.find(kSecond + " (second)"), std::string::npos) << message;
  EXPECT_EQ(message.find(kThird), std::string::npos) << message;
}

TEST(ExpandModelIdPrefixTest, APrefixOfNoModelIsNotFound) {
  absl::StatusOr<std::string> id = ExpandModelIdPrefix("ef", ThreeModels());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kNotFound) << id.status();
  EXPECT_NE(id.status().message().find("no model id starts with 'ef' (3 models registered"),
            std::string::npos)
      << id.status();
}

TEST(ExpandModelIdPrefixTest, RejectsWhatCannotBeAnId) {
  EXPECT_EQ(ExpandModelIdPrefix("", ThreeModels()).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::string> not_hex = ExpandModelIdPrefix("ab-1", ThreeModels());
  EXPECT_EQ(not_hex.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(not_hex.status().message().find("'ab-1' is not a model id"), std::string::npos);
  EXPECT_EQ(ExpandModelIdPrefix(kFirst + "0", ThreeModels()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(IsFullModelIdTest, OnlySixtyFourHexDigits) {
  EXPECT_TRUE(IsFullModelId(kFirst));
  EXPECT_FALSE(IsFullModelId(kFirst.substr(1)));
  EXPECT_FALSE(IsFullModelId(std::string(63, 'a') + "g"));
}

}  // namespace
}  // namespace blockswap::ctl
