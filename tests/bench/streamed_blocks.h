// The blocks a trainer with `blocks_to_swap` of a model uploads, for the
// benchmarks of mixed blocks_to_swap: its streaming blocks (client::PlaceBlocks, the
// reference's evenly spaced choice), block b of the model holding
// testing::BlockContent(seed, block_bytes, b) as one U8 tensor "weight". Two
// trainers of one seed upload the same bytes for every block they share.
#ifndef BLOCKSWAP_TESTS_BENCH_STREAMED_BLOCKS_H_
#define BLOCKSWAP_TESTS_BENCH_STREAMED_BLOCKS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "client/core/model.h"

namespace blockswap::bench {

class StreamedBlocks {
 public:
  // Makes the blocks' bytes (before a benchmark starts its clock).
  static absl::StatusOr<StreamedBlocks> Make(uint32_t blocks, uint32_t blocks_to_swap,
                                             uint64_t block_bytes, uint64_t seed);

  // Per streamed block, in order: its index in the whole model.
  const std::vector<uint32_t>& indices() const { return indices_; }
  // What client::Model::Register takes; points into this object.
  const std::vector<std::vector<client::TensorUpload>>& uploads() const { return uploads_; }

 private:
  StreamedBlocks() = default;

  std::vector<uint32_t> indices_;
  std::vector<std::vector<std::byte>> content_;
  std::vector<std::vector<client::TensorUpload>> uploads_;
};

}  // namespace blockswap::bench

#endif  // BLOCKSWAP_TESTS_BENCH_STREAMED_BLOCKS_H_
