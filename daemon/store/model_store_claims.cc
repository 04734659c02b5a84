// ModelStore's counts of the blocks it holds: the claims of registrations in
// progress and the sealed models naming each block, and the uids charged.
#include <set>

#include "daemon/store/model_store.h"
#include "daemon/store/model_store_internal.h"

namespace blockswap::daemon {

// Ends `claim` (BlockTable::EndClaim), removing the files of the blocks
// that go.
void ModelStore::EndClaimLocked(const BlockClaim& claim, bool published) {
  for (const std::string& block_id : blocks_.EndClaim(claim, published)) {
    files_->RemoveQuietly(BlockFileName(block_id));
  }
}

// The uids charged for `id` (its registrants'), charged or released.
void ModelStore::ChargeUidLocked(const std::string& id, uid_t uid,
                                 const std::vector<BlockRef>& blocks) {
  if (charged_uids_[id].insert(uid).second) uid_holds_.Add(uid, blocks);
}

}  // namespace blockswap::daemon
