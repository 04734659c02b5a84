#include "daemon/store/model.h"

#include <algorithm>

namespace blockswap::daemon {

Model::~Model() = default;

const std::byte* Model::block(size_t b) const {
  return b < blocks_.size() ? blocks_[b]->data() : nullptr;
}

uint64_t Model::block_bytes(size_t b) const {
  return b < layout_.blocks.size() ? layout_.blocks[b].bytes : 0;
}

bool Model::pinned() const {
  return std::all_of(blocks_.begin(), blocks_.end(),
                     [](const auto& block) { return block->pinned(); });
}

size_t Model::staged_blocks() const {
  return std::count_if(blocks_.begin(), blocks_.end(),
                       [](const auto& block) { return block->staged(); });
}

}  // namespace blockswap::daemon
