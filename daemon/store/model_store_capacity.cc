// ModelStore's capacity: the limits a new model is checked against, and the
// eviction of unreferenced models that makes room.
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/budget/master_limits.h"
#include "daemon/runtime/logging.h"
#include "daemon/store/model_store.h"
#include "daemon/store/model_store_internal.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

// The order of a registration's checks (docs/store.md, "Checks before
// work"): this one, from the declared sizes; then hashing; then the exact
// checks (the uid's limits over the blocks' ids, the content held
// already); then eviction of models no session holds, for a registration
// that will commit; then the write.
//
// Whether a model whose masters take `bytes` in `blocks` blocks could be
// registered by `uid`, pessimistically (every block new to the node and
// to the uid), counting as room what evicting every model no session
// holds would free, but evicting nothing: RESOURCE_EXHAUSTED with
// Register's messages otherwise. Reads nothing, so an impossible
// registration is refused before it is read, hashed or makes anyone's
// models go. Advisory (a concurrent registration may take the room
// meanwhile); pessimistic for content held already, which needs no room.
absl::Status ModelStore::CheckCapacity(uid_t uid, uint64_t bytes, uint64_t blocks) {
  absl::MutexLock lock(&mu_);
  return CheckDeclaredLocked(uid, bytes, blocks);
}

// CheckCapacity, under mu_.
absl::Status ModelStore::CheckDeclaredLocked(uid_t uid, uint64_t bytes, uint64_t blocks) const {
  // The uid's own limits first: the same answer whatever others hold.
  BLOCKSWAP_RETURN_IF_ERROR(uid_holds_.CheckDeclared(uid, blocks, bytes, options_.uid_limits));
  EvictionReason short_of = EvictionReason::kTmpfs;
  return room_.Fits(bytes, blocks, blocks_.committed(), EvictableLocked(), &short_of);
}

absl::Status ModelStore::MakeRoom(uid_t uid, uint64_t bytes, uint64_t blocks) {
  absl::MutexLock lock(&mu_);
  BLOCKSWAP_RETURN_IF_ERROR(CheckDeclaredLocked(uid, bytes, blocks));
  return MakeRoomLocked(bytes, blocks, uid);
}

BlockTotals ModelStore::EvictableLocked() const {
  // A block stays if a model in use names it or a registration claims it.
  std::set<const BlockMaster*> kept;
  for (const auto& [id, model] : models_) {
    if (References(model) == 0) continue;
    for (const auto& block : model->blocks_) kept.insert(block.get());
  }
  return blocks_.FreeableBeside(kept);
}

// Evicts unreferenced models until `bytes` more in `blocks` more blocks
// of a registration by `uid` fit (MasterRoom::Fits); the error of the check that
// still fails otherwise. The victims come in EvictionOrder, weighed by what
// their owners hold of what is short (blocks or bytes).
// Called only once the registration passed its other checks: it will
// commit unless a concurrent one took the room.
absl::Status ModelStore::MakeRoomLocked(uint64_t bytes, uint64_t blocks, uid_t uid) {
  while (true) {
    EvictionReason short_of = EvictionReason::kTmpfs;
    absl::Status fits = room_.Fits(bytes, blocks, blocks_.committed(), {}, &short_of);
    if (fits.ok()) return fits;
    const bool short_of_blocks = short_of == EvictionReason::kMaxMasterBlocks;
    std::vector<EvictionOrder::Candidate> idle;
    for (const auto& [id, model] : models_) {
      if (References(model) != 0) continue;
      uint64_t weight = 0;
      if (auto charged = charged_uids_.find(id); charged != charged_uids_.end()) {
        for (uid_t owner : charged->second) {
          weight = std::max(weight,
                            short_of_blocks ? uid_holds_.blocks(owner) : uid_holds_.bytes(owner));
        }
      }
      idle.push_back({.id = id, .weight = weight});
    }
    const std::string id = eviction_order_.First(idle);
    if (id.empty()) return fits;
    EvictLocked(id, short_of,
                absl::StrCat("room for a model of ", bytes, " bytes in ", blocks,
                             " new blocks registered by uid ", uid));
  }
}

// Removes model `id`, logging it (model, owners, reason: `why` says for
// what) and counting it by `reason`.
void ModelStore::EvictLocked(const std::string& id, EvictionReason reason, absl::string_view why) {
  auto it = models_.find(id);
  if (it == models_.end()) return;
  std::string owners;
  // The manifest first: without it a restarted daemon adopts nothing.
  files_->RemoveQuietly(ManifestFileName(id));
  if (auto charged = charged_uids_.find(id); charged != charged_uids_.end()) {
    const std::vector<BlockRef> refs = BlockRefs(it->second->blocks_);
    for (uid_t uid : charged->second) {
      uid_holds_.Remove(uid, refs);
      absl::StrAppend(&owners, owners.empty() ? "" : ",", uid);
    }
    charged_uids_.erase(charged);
  }
  Log(LogLevel::kInfo,
      absl::StrCat("evicted model ", id.substr(0, 16), " '", it->second->name(), "' (",
                   it->second->masters_bytes(), " bytes in ", it->second->block_count(),
                   " blocks) of uid ", owners.empty() ? "none" : owners,
                   ": reason=", EvictionReasonName(reason), " (", why, ")"));
  // A block goes only with the last model that names it.
  for (const auto& block : DistinctBlocks(it->second->blocks_)) {
    if (blocks_.ReleaseNamed(block->id())) files_->RemoveQuietly(BlockFileName(block->id()));
  }
  ++stats_.evicted;
  ++stats_.evicted_by[static_cast<int>(reason)];
  eviction_order_.Forget(id);
  models_.erase(it);  // unpins and unmaps what no other model holds
}

absl::Status ModelStore::Evict(absl::string_view id, absl::string_view why) {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(id);
  if (it == models_.end()) return NoSuchModelError(id);
  if (uint64_t refs = References(it->second); refs != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("model ", it->first, " is still referenced ", refs,
                     " time(s) (open in sessions or loads in flight); it can be evicted once "
                     "no session holds it"));
  }
  EvictLocked(it->first, EvictionReason::kOperator, why);
  return absl::OkStatus();
}

void ModelStore::ReleaseReservation(uint64_t bytes, uint64_t blocks) {
  absl::MutexLock lock(&mu_);
  blocks_.Unreserve(bytes, blocks);
}

}  // namespace blockswap::daemon
