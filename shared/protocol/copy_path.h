// Who copies a block from its master into a trainer's ring slot: the
// daemon's copy stream into a ring it exports, or the trainer's own copy
// stream from its read-only mapping of the masters into a ring of its own
// (docs/architecture.md, "Two copy paths"). The daemon's `copy` key gives a
// session's default; a client asks with BLOCKSWAP_COPY.
#ifndef BLOCKSWAP_SHARED_PROTOCOL_COPY_PATH_H_
#define BLOCKSWAP_SHARED_PROTOCOL_COPY_PATH_H_

#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "blockswap/v1/blockswap.pb.h"

namespace blockswap {

enum class CopyPath { kDaemon, kTrainer };

// "daemon" or "trainer"; INVALID_ARGUMENT naming both for anything else.
absl::StatusOr<CopyPath> ParseCopyPath(absl::string_view name);
absl::string_view CopyPathName(CopyPath path);

v1::CopyPath CopyPathToProto(CopyPath path);
// nullopt for COPY_PATH_UNSPECIFIED; INVALID_ARGUMENT for a value this
// build does not know.
absl::StatusOr<std::optional<CopyPath>> CopyPathFromProto(int value);

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_PROTOCOL_COPY_PATH_H_
