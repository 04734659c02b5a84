// Model ids as an operator types them: the tables show 16 of the 64 hex
// digits, so every command that takes a model id (verify, evict) also takes a
// unique prefix of one, expanded against the daemon's Models reply. Pure:
// tested without a daemon.
#ifndef BLOCKSWAP_TOOLS_BLOCKSWAPCTL_MODEL_ID_PREFIX_H_
#define BLOCKSWAP_TOOLS_BLOCKSWAPCTL_MODEL_ID_PREFIX_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "blockswap/v1/blockswap.pb.h"

namespace blockswap::ctl {

inline constexpr size_t kModelIdDigits = 64;  // SHA-256, in hex

// Whether `text` is a whole model id (64 hex digits), which needs no lookup.
bool IsFullModelId(absl::string_view text);

// The one registered id that starts with `prefix` (hex digits, either case).
// INVALID_ARGUMENT for an empty or non-hex prefix, or one that matches
// several models (the error lists them); NOT_FOUND when none matches.
absl::StatusOr<std::string> ExpandModelIdPrefix(absl::string_view prefix,
                                                const v1::ModelsReply& models);

}  // namespace blockswap::ctl

#endif  // BLOCKSWAP_TOOLS_BLOCKSWAPCTL_MODEL_ID_PREFIX_H_
