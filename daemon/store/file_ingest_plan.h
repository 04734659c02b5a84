// Which tensors of a safetensors file (or sharded set) become which block:
// the pure part of registering a model from a file (no I/O).
//
// Grouping: `block_pattern` is an RE2 regex with exactly one capture group,
// searched in each tensor's name (anchor it with ^ as needed); the group is
// the block index (decimal), the name relative to the block is what follows
// the match. A tensor in a block is streamed when `select` (an RE2 regex
// searched in the full name; empty: every tensor) matches and, with
// `select_rank` > 0, it has that many dimensions. Every other tensor — outside
// every block, or not selected — is an "extra": the client fetches those from
// the extras model (one block, full names) instead of reading the file.
//
// Order: blocks by index, which must run 0..N-1 without a gap; within a block
// (and in the extras block) tensors keep the order of their bytes in the files
// (shards in the order given, then data offset), packed with PackBlock. That
// order makes one sequential pass over the file fill each block front to
// back, and it is what a client uploading the same blocks must use to get the
// same model id (the layout is in the reply).
#ifndef BLOCKSWAP_DAEMON_STORE_FILE_INGEST_PLAN_H_
#define BLOCKSWAP_DAEMON_STORE_FILE_INGEST_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "shared/protocol/model_layout.h"
#include "shared/base/safetensors_header.h"

namespace blockswap::daemon {

struct IngestSpec {
  std::string block_pattern = {};
  std::string select = {};  // empty: every tensor of a block
  uint32_t select_rank = 0;  // 0: any rank
};

// Where the bytes of one tensor of the plan come from.
struct TensorSource {
  size_t shard = 0;
  uint64_t file_offset = 0;  // of its first byte in the shard
  uint64_t bytes = 0;
};

struct IngestPlan {
  ModelLayout layout;  // the streamed blocks
  std::vector<std::vector<TensorSource>> sources;  // [block][tensor], as in `layout`
  ModelLayout extras;  // one block, or none when every tensor is streamed
  std::vector<TensorSource> extras_sources;
};

// INVALID_ARGUMENT: a pattern that does not compile or has not exactly one
// capture group, a captured index that is not a decimal number, an empty
// relative name, a name in two shards, block indices with a gap, a block
// PackBlock refuses. NOT_FOUND: the pattern matches no tensor, or the
// selector leaves no tensor in any block. Messages name the file (`names`,
// one per shard), the tensor and the rule.
absl::StatusOr<IngestPlan> PlanIngest(const std::vector<SafetensorsHeader>& shards,
                                      const std::vector<std::string>& names,
                                      const IngestSpec& spec);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_FILE_INGEST_PLAN_H_
