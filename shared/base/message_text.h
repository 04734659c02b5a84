// Client-supplied text and numbers as they appear in error messages.
//
// Part of blockswap_base (no gRPC, no protobuf), so the header parser
// and its fuzzer can use it.
#ifndef BLOCKSWAP_SHARED_BASE_MESSAGE_TEXT_H_
#define BLOCKSWAP_SHARED_BASE_MESSAGE_TEXT_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace blockswap {

// `text` in single quotes, C-escaped and cut to 64 bytes ("..." after), so a
// hostile name can neither flood a log nor smuggle control characters in.
std::string Quoted(absl::string_view text);

// A file's permission bits as chmod takes them: "0700".
std::string OctalMode(uint32_t mode);

// "[2,3]", cut after 16 dimensions (",..." then).
std::string FormatShape(absl::Span<const uint64_t> shape);

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_BASE_MESSAGE_TEXT_H_
