// Matching the tensors a trainer streams of one block with a model's block:
// the rule the torch layer and the Python package both follow (through
// bs_model_match_block), so that a module and a model registered or read
// from a file apart are bound only when they agree.
#ifndef BLOCKSWAP_CLIENT_CORE_BLOCK_MATCH_H_
#define BLOCKSWAP_CLIENT_CORE_BLOCK_MATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "shared/protocol/model_layout.h"

namespace blockswap::client {

// One tensor the caller streams: the model's name for it, its safetensors
// dtype and its shape.
struct WantedTensor {
  absl::string_view name;
  absl::string_view dtype;
  absl::Span<const uint64_t> shape;
};

// The offset in `block` of each of `wanted`, in order. The block must hold
// exactly the wanted tensors, each with the same dtype and shape. `where`
// names the block in messages ("model 3f2a... block 4"). Errors name the
// first disagreement:
//   INVALID_ARGUMENT     a name wanted twice; a dtype or shape that differs
//   NOT_FOUND            a wanted tensor the block lacks (listing its names)
//   FAILED_PRECONDITION  a tensor of the block that is not wanted
absl::StatusOr<std::vector<uint64_t>> MatchBlock(const BlockSpec& block,
                                                 absl::Span<const WantedTensor> wanted,
                                                 absl::string_view where);

}  // namespace blockswap::client

#endif  // BLOCKSWAP_CLIENT_CORE_BLOCK_MATCH_H_
