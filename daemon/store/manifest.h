// The manifest of a sealed model: the JSON file beside its master file that
// a restarted daemon adopts it from (id, name, source, registrants, layout,
// block hashes and where each block sits in the master file).
//
// Compatibility: "registrants" was added within version 1. A manifest
// without it (written before) parses with no registrants; a daemon that
// predates it ignores the key and still adopts the model ("source" stays the
// first registration's).
#ifndef BLOCKSWAP_DAEMON_STORE_MANIFEST_H_
#define BLOCKSWAP_DAEMON_STORE_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/store/registrants.h"
#include "shared/protocol/model_layout.h"

namespace blockswap::daemon {

// The parts of a manifest.
struct Manifest {
  std::string id;
  std::string name;
  std::string source;
  std::vector<Registrant> registrants;  // empty in manifests written before they were recorded
  ModelLayout layout;
  std::vector<Sha256Digest> block_hashes;
  std::vector<uint64_t> master_offsets;
  uint64_t masters_bytes = 0;
};

// The manifest's text (format "blockswap-manifest", version 1).
std::string EncodeManifest(const Manifest& manifest);

// FAILED_PRECONDITION for text that is not a version 1 manifest or is
// malformed (saying what was wrong). Says nothing of whether the layout or
// the hashes are valid: the store checks them.
absl::StatusOr<Manifest> ParseManifest(const std::string& text);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_MANIFEST_H_
