#include "daemon/session/visible_blocks.h"

#include "absl/strings/str_cat.h"

namespace blockswap::daemon {

VisibleBlocks VisibleBlocks::Of(const ModelStore& store, const ModelVisibility& visibility,
                                const Peer& peer) {
  VisibleBlocks visible;
  for (const std::shared_ptr<const Model>& model : store.List()) {
    if (!visibility.MaySee(peer, model->registrants().List())) continue;
    for (size_t b = 0; b < model->block_count(); ++b) {
      visible.masters_.emplace(model->block_master(b)->id(), model->block_master(b));
    }
  }
  return visible;
}

absl::StatusOr<KnownBlocks> VisibleBlocks::Resolve(const std::vector<HeldBlockClaim>& claims,
                                                   const ModelLayout& layout) const {
  KnownBlocks known;
  known.masters.resize(layout.blocks.size());
  known.hashes.resize(layout.blocks.size());
  for (const HeldBlockClaim& claim : claims) {
    const std::string block_id = BlockId(layout.blocks[claim.block], claim.hash);
    auto it = masters_.find(block_id);
    if (it == masters_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("held block ", claim.block, " (block id ", block_id.substr(0, 16),
                       "...) is not held by this blockswapd in a model you may see: upload it"));
    }
    known.masters[claim.block] = it->second;
    known.hashes[claim.block] = claim.hash;
  }
  return known;
}

}  // namespace blockswap::daemon
