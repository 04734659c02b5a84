// ModelStore's counts of the blocks it holds: the claims of registrations in
// progress and the sealed models naming each block, and the uids charged.
#include <set>

#include "daemon/store/model_store.h"
#include "daemon/store/model_store_internal.h"

namespace blockswap::daemon {

ModelStore::BlockClaim ModelStore::ClaimBlocksLocked(const std::vector<std::string>& ids,
                                                     const std::vector<uint64_t>& bytes) {
  // All or nothing: a registration that waited holding claims could wait for
  // one that waits for it.
  auto busy = [&] {
    for (const std::string& block_id : ids) {
      if (!blocks_.contains(block_id) && blocks_in_progress_.contains(block_id)) return true;
    }
    return false;
  };
  while (busy()) registration_done_.Wait(&mu_);
  BlockClaim claim;
  claim.held.resize(ids.size());
  std::set<absl::string_view> seen;
  for (size_t b = 0; b < ids.size(); ++b) {
    const bool first = seen.insert(ids[b]).second;
    if (auto it = blocks_.find(ids[b]); it != blocks_.end()) {
      claim.held[b] = it->second.master;
      if (first) {
        ++it->second.claims;
        claim.held_ids.push_back(ids[b]);
      }
    } else if (first) {
      blocks_in_progress_.insert(ids[b]);
      claim.claimed.push_back(ids[b]);
      claim.claimed_positions.push_back(b);
      claim.missing_bytes += BlockFileBytes(bytes[b]);
    }
  }
  return claim;
}

void ModelStore::ReleaseBlockLocked(const std::string& block_id, uint64_t HeldBlock::*field) {
  auto it = blocks_.find(block_id);
  if (it == blocks_.end()) return;
  --(it->second.*field);
  if (it->second.models != 0 || it->second.claims != 0) return;
  files_->RemoveQuietly(BlockFileName(block_id));
  block_bytes_ -= it->second.master->file_bytes();
  blocks_.erase(it);  // unpins and unmaps once no Model holds it
}

void ModelStore::EndClaimLocked(const BlockClaim& claim, bool published) {
  for (const std::string& block_id : claim.claimed) blocks_in_progress_.erase(block_id);
  for (const std::string& block_id : claim.held_ids) {
    if (published) ++blocks_.at(block_id).models;
    ReleaseBlockLocked(block_id, &HeldBlock::claims);
  }
}

void ModelStore::ChargeUidLocked(const std::string& id, uid_t uid,
                                 const std::vector<BlockRef>& blocks) {
  if (charged_uids_[id].insert(uid).second) uid_holds_.Add(uid, blocks);
}

}  // namespace blockswap::daemon
