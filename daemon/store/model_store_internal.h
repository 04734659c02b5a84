// What the files of ModelStore's implementation share (model_store*.cc,
// master_draft.cc): the names and modes of the directory's files, the check
// every new model passes, and a model's distinct blocks. Nothing else
// includes it.
#ifndef BLOCKSWAP_DAEMON_STORE_MODEL_STORE_INTERNAL_H_
#define BLOCKSWAP_DAEMON_STORE_MODEL_STORE_INTERNAL_H_

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/store/block_master.h"
#include "daemon/store/registrants.h"
#include "daemon/store/uid_holds.h"
#include "shared/protocol/model_layout.h"

namespace blockswap::daemon {

inline constexpr absl::string_view kLockName = ".lock";
inline constexpr absl::string_view kBlockSuffix = ".block";
inline constexpr absl::string_view kManifestSuffix = ".manifest";
inline constexpr absl::string_view kTempSuffix = ".tmp";

// Sealed master files are read-only even for their owner: a client of the
// daemon's own uid holding the read-only descriptor OpenModel gave it cannot
// reopen it writable through /proc/self/fd (root can; root is trusted).
inline constexpr mode_t kSealedMastersMode = 0400;
inline constexpr mode_t kManifestMode = 0600;

inline std::string BlockFileName(absl::string_view block_id) {
  return absl::StrCat(block_id, kBlockSuffix);
}
inline std::string ManifestFileName(absl::string_view model_id) {
  return absl::StrCat(model_id, kManifestSuffix);
}

// What every new model must satisfy, whichever way it comes in (Register,
// BeginDraft).
absl::Status ValidateNewModel(const ModelLayout& layout, absl::string_view name);

// `registrant` with `name`, the name its registration gave the model, unless
// it carries one already.
inline Registrant Named(Registrant registrant, absl::string_view name) {
  if (registrant.name.empty()) registrant.name = std::string(name);
  return registrant;
}

using BlockMasters = std::vector<std::shared_ptr<const BlockMaster>>;

// The distinct blocks of a model (positions with equal blocks share one),
// in first-position order.
BlockMasters DistinctBlocks(const BlockMasters& blocks);
std::vector<BlockRef> BlockRefs(const BlockMasters& blocks);
uint64_t DistinctFileBytes(const BlockMasters& blocks);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_MODEL_STORE_INTERNAL_H_
