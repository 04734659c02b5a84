// The manifest of a sealed model: the JSON file that a restarted daemon
// adopts it from (id, name, source, registrants, layout, block hashes and the
// masters its blocks are in).
//
// Versions:
//   1  one master file per model, <id>.masters; each block at its
//      "master_offset", the file "masters_bytes" long. Read only to convert
//      it (ModelStore adopts it into block files).
//   2  one master file per distinct block, <block id>.block (BlockId); each
//      block lists its "block" id. What this daemon writes.
// A manifest of another version is UNIMPLEMENTED here: a newer daemon wrote
// it, and the store leaves it alone instead of deleting what it cannot read.
//
// Compatibility within a version: "registrants" was added within version 1.
// A manifest without it (written before) parses with no registrants; a
// daemon that predates it ignores the key and still adopts the model
// ("source" stays the first registration's).
#ifndef BLOCKSWAP_DAEMON_STORE_MANIFEST_H_
#define BLOCKSWAP_DAEMON_STORE_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/store/registrants.h"
#include "shared/protocol/model_layout.h"

namespace blockswap::daemon {

// The version EncodeManifest writes by default.
inline constexpr uint64_t kManifestVersion = 2;

// The parts of a manifest.
struct Manifest {
  uint64_t version = kManifestVersion;
  std::string id;
  std::string name;
  std::string source;
  std::vector<Registrant> registrants;  // empty in manifests written before they were recorded
  ModelLayout layout;
  std::vector<Sha256Digest> block_hashes;
  std::vector<std::string> block_ids;    // version 2: the block master of each block
  std::vector<uint64_t> master_offsets;  // version 1: each block's place in <id>.masters
  uint64_t masters_bytes = 0;            // version 1: the size of <id>.masters
};

// The manifest's text (format "blockswap-manifest", `manifest.version`: 2, or
// 1 for the tests of the conversion).
std::string EncodeManifest(const Manifest& manifest);

// A version 1 or 2 manifest. UNIMPLEMENTED, naming the version, for a
// blockswap manifest of another version; FAILED_PRECONDITION for text that
// is not a blockswap manifest or is malformed (saying what was wrong). Says
// nothing of whether the layout, hashes or block ids are valid: the store
// checks them.
absl::StatusOr<Manifest> ParseManifest(const std::string& text);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_MANIFEST_H_
