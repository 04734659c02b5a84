#include "shared/base/env_settings.h"

#include <cstdlib>

namespace blockswap {
namespace {

#define BLOCKSWAP_PRODUCT_ROW(id, name, kind, unset, meaning) \
  {EnvSetting::id, name, EnvKind::kind, unset, EnvOwner::kProduct, meaning},
#define BLOCKSWAP_FOREIGN_ROW(id, name, kind, unset, meaning) \
  {EnvSetting::id, name, EnvKind::kind, unset, EnvOwner::kForeign, meaning},
#define BLOCKSWAP_TEST_ROW(id, name, kind, unset, meaning) \
  {EnvSetting::id, name, EnvKind::kind, unset, EnvOwner::kTest, meaning},

// In the enum's order: product, foreign, then (with the test hooks) test rows.
constexpr EnvSettingRow kRows[] = {BLOCKSWAP_PRODUCT_ENV_SETTINGS(BLOCKSWAP_PRODUCT_ROW)
                                       BLOCKSWAP_FOREIGN_ENV_SETTINGS(BLOCKSWAP_FOREIGN_ROW)
#if BLOCKSWAP_TEST_HOOKS
                                           BLOCKSWAP_TEST_ENV_SETTINGS(BLOCKSWAP_TEST_ROW)
#endif
};

}  // namespace

absl::Span<const EnvSettingRow> EnvSettings() { return kRows; }

const EnvSettingRow& EnvSettingOf(EnvSetting setting) { return kRows[static_cast<int>(setting)]; }

std::optional<std::string> EnvValue(EnvSetting setting) {
  const char* value = std::getenv(EnvName(setting));
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

}  // namespace blockswap
