#include "daemon/session/random_token.h"

#include <set>

#include <gtest/gtest.h>

namespace blockswap::daemon {
namespace {

TEST(RandomToken, Is32HexDigitsAndDoesNotRepeat) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    auto token = RandomToken();
    ASSERT_TRUE(token.ok());
    ASSERT_EQ(token->size(), 32u);
    EXPECT_EQ(token->find_first_not_of("0123456789abcdef"), std::string::npos) << *token;
    EXPECT_TRUE(seen.insert(*token).second) << "repeated token " << *token;
  }
}

TEST(RandomNonZero64, IsNeverZeroAndVaries) {
  std::set<uint64_t> seen;
  for (int i = 0; i < 100; ++i) {
    auto value = RandomNonZero64();
    ASSERT_TRUE(value.ok());
    EXPECT_NE(*value, 0u);
    seen.insert(*value);
  }
  EXPECT_GT(seen.size(), 95u);
}

}  // namespace
}  // namespace blockswap::daemon
