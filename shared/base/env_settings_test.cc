#include "shared/base/env_settings.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace blockswap {
namespace {

TEST(EnvSettingsTest, EachRowIsFoundByItsIdAndNamedOnce) {
  std::set<std::string> names;
  for (const EnvSettingRow& row : EnvSettings()) {
    EXPECT_EQ(&EnvSettingOf(row.id), &row) << row.name << " is out of the enum's order";
    EXPECT_TRUE(names.insert(row.name).second) << row.name << " has two rows";
    EXPECT_EQ(absl::StartsWith(row.name, "BLOCKSWAP_"), row.owner != EnvOwner::kForeign)
        << row.name << ": blockswap's variables, and only they, are named BLOCKSWAP_*";
    EXPECT_NE(*row.unset, '\0') << row.name << " does not say what holds when it is unset";
    EXPECT_NE(*row.meaning, '\0') << row.name << " does not say what it means";
  }
}

TEST(EnvSettingsTest, TestSwitchesAreRowsOnlyWithTheTestHooks) {
  int test_rows = 0;
  for (const EnvSettingRow& row : EnvSettings()) test_rows += row.owner == EnvOwner::kTest;
  if (BLOCKSWAP_TEST_HOOKS) {
    EXPECT_GT(test_rows, 0);
  } else {
    EXPECT_EQ(test_rows, 0);
  }
}

TEST(EnvSettingsTest, AnEmptyValueReadsAsUnset) {
  const EnvSetting setting = EnvSetting::kPython;
  ASSERT_EQ(::unsetenv(EnvName(setting)), 0);
  EXPECT_EQ(EnvValue(setting), std::nullopt);
  ASSERT_EQ(::setenv(EnvName(setting), "", 1), 0);
  EXPECT_EQ(EnvValue(setting), std::nullopt);
  ASSERT_EQ(::setenv(EnvName(setting), "/opt/python3", 1), 0);
  EXPECT_EQ(EnvValue(setting), "/opt/python3");
  ASSERT_EQ(::unsetenv(EnvName(setting)), 0);
}

TEST(EnvSettingsTest, ANumberIsReadOnlyWhenItParsesAsItsType) {
  const EnvSetting setting = EnvSetting::kHostDevices;
  ASSERT_EQ(::setenv(EnvName(setting), "3", 1), 0);
  EXPECT_EQ(EnvNumber<int>(setting), 3);
  ASSERT_EQ(::setenv(EnvName(setting), "-3", 1), 0);
  EXPECT_EQ(EnvNumber<int>(setting), -3);
  EXPECT_EQ(EnvNumber<uint64_t>(setting), std::nullopt);
  ASSERT_EQ(::setenv(EnvName(setting), "three", 1), 0);
  EXPECT_EQ(EnvNumber<int>(setting), std::nullopt);
  ASSERT_EQ(::unsetenv(EnvName(setting)), 0);
  EXPECT_EQ(EnvNumber<int>(setting), std::nullopt);
}

// The README's table of variables (its section "Environment variables")
// lists blockswap's own and the other programs' variables it reads, each
// once, and nothing else: a row added to the table without its line there,
// or a line left for a variable no longer read, fails here.
TEST(EnvSettingsTest, TheReadmeListsEveryVariableThatIsNotATestSwitch) {
  std::ifstream readme(std::string(BLOCKSWAP_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(readme.good()) << "cannot read README.md under " << BLOCKSWAP_SOURCE_DIR;
  std::multiset<std::string> listed;
  bool in_section = false;
  for (std::string line; std::getline(readme, line);) {
    if (absl::StartsWith(line, "## ")) in_section = line == "## Environment variables";
    if (!in_section || !absl::StartsWith(line, "| `")) continue;
    std::vector<std::string> cells = absl::StrSplit(line, '`');
    listed.insert(cells.at(1));
  }
  ASSERT_FALSE(listed.empty()) << "README.md has no table under \"## Environment variables\"";
  for (const EnvSettingRow& row : EnvSettings()) {
    const size_t times = listed.count(row.name);
    if (row.owner == EnvOwner::kTest) {
      EXPECT_EQ(times, 0u) << row.name << " is a test switch, listed in the README";
    } else {
      EXPECT_EQ(times, 1u) << row.name << " is listed " << times << " times in the README";
    }
    listed.erase(row.name);
  }
  for (const std::string& name : listed) {
    ADD_FAILURE() << "the README lists " << name << ", which is no row of env_settings.h";
  }
}

}  // namespace
}  // namespace blockswap
