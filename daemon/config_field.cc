#include "daemon/config_field.h"

#include <cstdint>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace blockswap::daemon {

absl::StatusOr<uint64_t> ParseByteCount(absl::string_view text) {
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < rest.size() && absl::ascii_isdigit(rest[digits])) ++digits;
  uint64_t number = 0;
  if (digits == 0 || !absl::SimpleAtoi(rest.substr(0, digits), &number)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected a byte count such as 1048576, \"512MiB\" or \"8GiB\", got '", text, "'"));
  }
  absl::string_view unit = absl::StripAsciiWhitespace(rest.substr(digits));
  static const std::pair<const char*, uint64_t> kUnits[] = {
      {"", 1},
      {"B", 1},
      {"K", 1000},
      {"M", 1000 * 1000},
      {"G", 1000 * 1000 * 1000},
      {"T", uint64_t{1000} * 1000 * 1000 * 1000},
      {"KiB", uint64_t{1} << 10},
      {"MiB", uint64_t{1} << 20},
      {"GiB", uint64_t{1} << 30},
      {"TiB", uint64_t{1} << 40}};
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    if (number > UINT64_MAX / scale) {
      return absl::InvalidArgumentError(absl::StrCat("'", text, "' does not fit in 64 bits"));
    }
    return number * scale;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown unit '", unit, "' in '", text,
                                                 "' (B, K, M, G, T, KiB, MiB, GiB or TiB)"));
}

}  // namespace blockswap::daemon
