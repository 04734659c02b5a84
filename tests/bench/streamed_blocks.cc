#include "tests/bench/streamed_blocks.h"

#include <utility>

#include "client/scheduler/stream_scheduler.h"
#include "shared/base/status.h"
#include "tests/support/block_content.h"

namespace blockswap::bench {

absl::StatusOr<StreamedBlocks> StreamedBlocks::Make(uint32_t blocks, uint32_t blocks_to_swap,
                                                    uint64_t block_bytes, uint64_t seed) {
  BLOCKSWAP_ASSIGN_OR_RETURN(client::Placement placement,
                             client::PlaceBlocks(blocks, blocks_to_swap, /*ring_size=*/1));
  StreamedBlocks result;
  result.indices_ = std::move(placement.streaming);
  // The uploads point into content_: fill it first, so it never reallocates.
  for (uint32_t b : result.indices_) {
    result.content_.push_back(testing::BlockContent(seed, block_bytes, b));
  }
  for (const std::vector<std::byte>& bytes : result.content_) {
    client::TensorUpload upload;
    upload.spec = {.name = "weight", .dtype = "U8", .shape = {bytes.size()}};
    upload.data = bytes.data();
    result.uploads_.push_back({std::move(upload)});
  }
  return result;
}

}  // namespace blockswap::bench
