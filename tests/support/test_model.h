// Models for the store and session tests: a layout and its content as a
// staging area holds it (StagingOffsets), which ModelStore::Register and an
// upload take. Header-only, for test binaries that link blockswap_daemon_store.
#ifndef BLOCKSWAP_TESTS_SUPPORT_TEST_MODEL_H_
#define BLOCKSWAP_TESTS_SUPPORT_TEST_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "daemon/store/block_placement.h"
#include "shared/protocol/model_layout.h"

namespace blockswap::testing {

struct TestModel {
  ModelLayout layout;
  daemon::BlockPlacement placement;  // StagingOffsets(layout)
  std::vector<std::byte> content;

  // The bytes of block b.
  const std::byte* block(size_t b) const { return content.data() + placement.offsets[b]; }
};

// `blocks` blocks of two tensors each (F32 [b + 1, columns] and BF16 [10]),
// filled with bytes derived from `seed` and (b, offset), zero padding.
inline TestModel MakeModel(uint8_t seed, size_t blocks = 3, uint64_t columns = 100) {
  TestModel model;
  for (size_t b = 0; b < blocks; ++b) {
    model.layout.blocks.push_back(
        *PackBlock({TensorSpec{.name = "w", .dtype = "F32", .shape = {b + 1, columns}},
                    TensorSpec{.name = "bias", .dtype = "BF16", .shape = {10}}}));
  }
  model.placement = *daemon::StagingOffsets(model.layout);
  model.content.assign(model.placement.total_bytes, std::byte{0});
  for (size_t b = 0; b < blocks; ++b) {
    for (const TensorSpec& tensor : model.layout.blocks[b].tensors) {
      for (uint64_t i = 0; i < tensor.length; ++i) {
        model.content[model.placement.offsets[b] + tensor.offset + i] =
            static_cast<std::byte>(seed * 31 + b * 7 + i);
      }
    }
  }
  return model;
}

// One block of a model, for Compose.
struct BlockOf {
  const TestModel& model;
  size_t block;
};

// A model of these blocks (the same layouts and bytes), in order: what a
// trainer streaming only some blocks, or two models' blocks, uploads.
inline TestModel Compose(const std::vector<BlockOf>& blocks) {
  TestModel model;
  for (const BlockOf& of : blocks) model.layout.blocks.push_back(of.model.layout.blocks[of.block]);
  model.placement = *daemon::StagingOffsets(model.layout);
  model.content.assign(model.placement.total_bytes, std::byte{0});
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::memcpy(model.content.data() + model.placement.offsets[i],
                blocks[i].model.block(blocks[i].block), model.layout.blocks[i].bytes);
  }
  return model;
}

// Blocks [first, first + count) of `model` as a model of their own.
inline TestModel Subset(const TestModel& model, size_t first, size_t count) {
  std::vector<BlockOf> blocks;
  for (size_t b = first; b < first + count; ++b) blocks.push_back({model, b});
  return Compose(blocks);
}

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_TEST_MODEL_H_
