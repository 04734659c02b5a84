#include "shared/base/message_text.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace blockswap {

std::string Quoted(absl::string_view text) {
  constexpr size_t kShown = 64;
  std::string out = absl::StrCat("'", absl::CEscape(text.substr(0, kShown)), "'");
  if (text.size() > kShown) absl::StrAppend(&out, "...");
  return out;
}

std::string OctalMode(uint32_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "0%03o", static_cast<unsigned>(mode & 07777));
  return text;
}

std::string FormatShape(absl::Span<const uint64_t> shape) {
  constexpr size_t kShown = 16;
  std::string out =
      absl::StrCat("[", absl::StrJoin(shape.subspan(0, std::min(shape.size(), kShown)), ","));
  if (shape.size() > kShown) absl::StrAppend(&out, ",...");
  absl::StrAppend(&out, "]");
  return out;
}

}  // namespace blockswap
