// The index of a sharded safetensors checkpoint
// ("model.safetensors.index.json": {"weight_map": {tensor: shard file}}),
// parsed for its shard files.
//
// Part of blockswap_base (no gRPC, no protobuf): it runs on untrusted input
// in the client and under libFuzzer (tests/fuzz/safetensors_header_fuzzer).
// Pure and thread-safe; never crashes on any input.
#ifndef BLOCKSWAP_SHARED_BASE_SAFETENSORS_INDEX_H_
#define BLOCKSWAP_SHARED_BASE_SAFETENSORS_INDEX_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace blockswap {

// Every distinct shard file the index's weight_map names, sorted. A shard
// must be a plain file name (no "/", not "." or ".."), since shards live
// beside their index. INVALID_ARGUMENT for invalid JSON or a missing or
// malformed weight_map.
absl::StatusOr<std::vector<std::string>> ParseSafetensorsIndex(absl::string_view json);

}  // namespace blockswap

#endif  // BLOCKSWAP_SHARED_BASE_SAFETENSORS_INDEX_H_
