// The manifest of a sealed model: the JSON file that a restarted daemon
// adopts it from (id, name, source, registrants, layout, block hashes and the
// block master, <block id>.block (BlockId), each block is in).
//
// The manifest carries its format's version so that a daemon recognises a
// format it does not read: such a manifest is UNIMPLEMENTED here (a newer
// daemon wrote it), and the store leaves it alone instead of deleting what
// it cannot read.
#ifndef BLOCKSWAP_DAEMON_STORE_MANIFEST_H_
#define BLOCKSWAP_DAEMON_STORE_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/store/registrants.h"
#include "shared/protocol/model_layout.h"

namespace blockswap::daemon {

// The format version EncodeManifest writes and ParseManifest reads.
inline constexpr uint64_t kManifestVersion = 1;

// The parts of a manifest.
struct Manifest {
  std::string id;
  std::string name;
  std::string source;
  std::vector<Registrant> registrants;
  ModelLayout layout;
  std::vector<Sha256Digest> block_hashes;
  std::vector<std::string> block_ids;  // the block master of each block
};

// The manifest's text (format "blockswap-manifest", version kManifestVersion).
std::string EncodeManifest(const Manifest& manifest);

// A manifest of version kManifestVersion. UNIMPLEMENTED, naming the version,
// for a blockswap manifest of another version; FAILED_PRECONDITION for text that
// is not a blockswap manifest or is malformed (saying what was wrong). Says
// nothing of whether the layout, hashes or block ids are valid: the store
// checks them.
absl::StatusOr<Manifest> ParseManifest(const std::string& text);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_MANIFEST_H_
