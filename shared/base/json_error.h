// The error of JSON text that does not parse, shared by the two parsers of
// safetensors JSON (the header, safetensors_header.h, and a sharded
// checkpoint's index, safetensors_index.h) so that both word it alike.
// Private to blockswap_base.
#ifndef BLOCKSWAP_SHARED_BASE_JSON_ERROR_H_
#define BLOCKSWAP_SHARED_BASE_JSON_ERROR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace blockswap {

// The error for `what` when it does not parse, with the JSON parser's message.
inline absl::Status NotJson(absl::string_view what, const std::string& error) {
  std::string message = absl::StrCat(what, " is not valid JSON: ", error);
  if (absl::StrContains(message, "UTF-8")) {
    absl::StrAppend(&message, " (names and strings must be valid UTF-8)");
  }
  return absl::InvalidArgumentError(message);
}

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_BASE_JSON_ERROR_H_
