// ModelStore's capacity: the limits a new model is checked against, and the
// eviction of unreferenced models that makes room.
#include <algorithm>
#include <cerrno>
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

namespace {

// The clause a refusal adds when evicting would free some of what it counts.
// What eviction could free moves with other users' models: withheld with the
// node's totals.
std::string EvictableClause(uint64_t evictable, absl::string_view what,
                            absl::string_view totals_withheld) {
  if (evictable == 0 || !totals_withheld.empty()) return "";
  return absl::StrCat("; evicting every model no session holds would free only ", evictable, " ",
                      what);
}

}  // namespace

absl::string_view EvictionReasonName(EvictionReason reason) {
  switch (reason) {
    case EvictionReason::kOperator:
      return "operator";
    case EvictionReason::kMaxPinnedBytes:
      return "max_pinned_bytes";
    case EvictionReason::kMaxMemoryBytes:
      return "max_memory_bytes";
    case EvictionReason::kMaxMasterBlocks:
      return "max_master_blocks";
    case EvictionReason::kTmpfs:
      return "tmpfs";
  }
  return "unknown";
}

absl::Status ModelStore::CheckBudget(uint64_t bytes, uint64_t evictable) const {
  // Otherwise what max_pinned_bytes cannot take is staged (Pin).
  if (options_.pinning != PinningPolicy::kAlways) return absl::OkStatus();
  // Registrations in progress count: their reservations are promises.
  const uint64_t committed = blocks_.committed_bytes();
  const uint64_t kept = committed - std::min(committed, evictable);
  const uint64_t limit = options_.max_pinned_bytes;
  if (limit != 0 && (bytes > limit || kept > limit - bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "model of ", bytes, " bytes would exceed --max-pinned-bytes=", limit, " (",
        options_.totals_withheld.empty()
            ? absl::StrCat(committed, " already pinned")
            : absl::StrCat("what is pinned already is not shown under ", options_.totals_withheld),
        ")", EvictableClause(std::min(committed, evictable), "bytes", options_.totals_withheld)));
  }
  return absl::OkStatus();
}

absl::StatusOr<Reservation> ModelStore::ChargeMemory(uint64_t bytes, absl::string_view name) const {
  if (options_.memory_budget == nullptr) return Reservation();
  return options_.memory_budget->Reserve(
      MemoryUse::kMasters, bytes + kBlockOverheadBytes,
      absl::StrCat("a block master of model '", name, "' (", bytes, " bytes + ",
                   kBlockOverheadBytes, " of descriptor, mapping and inode)"));
}

absl::Status ModelStore::CheckFreeSpace(uint64_t bytes, uint64_t evictable) const {
  BLOCKSWAP_ASSIGN_OR_RETURN(const uint64_t free_bytes, files_->FreeBytes());
  if (free_bytes + evictable < bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "model of ", bytes, " bytes does not fit: ", options_.directory, " has ", free_bytes,
        " bytes free", EvictableClause(evictable, "more", options_.totals_withheld)));
  }
  return absl::OkStatus();
}

absl::Status ModelStore::CheckCapacity(uid_t uid, uint64_t bytes, uint64_t blocks) {
  absl::MutexLock lock(&mu_);
  return CheckDeclaredLocked(uid, bytes, blocks);
}

absl::Status ModelStore::CheckDeclaredLocked(uid_t uid, uint64_t bytes, uint64_t blocks) const {
  // The uid's own limits first: the same answer whatever others hold.
  BLOCKSWAP_RETURN_IF_ERROR(uid_holds_.CheckDeclared(uid, blocks, bytes, options_.uid_limits));
  EvictionReason short_of = EvictionReason::kTmpfs;
  return FitsLocked(bytes, blocks, EvictableLocked(), &short_of);
}

absl::Status ModelStore::MakeRoom(uid_t uid, uint64_t bytes, uint64_t blocks) {
  absl::MutexLock lock(&mu_);
  BLOCKSWAP_RETURN_IF_ERROR(CheckDeclaredLocked(uid, bytes, blocks));
  return MakeRoomLocked(bytes, blocks, uid);
}

ModelStore::Evictable ModelStore::EvictableLocked() const {
  // A block stays if a model in use names it or a registration claims it.
  std::set<const BlockMaster*> kept;
  for (const auto& [id, model] : models_) {
    if (References(model) == 0) continue;
    for (const auto& block : model->blocks_) kept.insert(block.get());
  }
  return blocks_.FreeableBeside(kept);
}

absl::Status ModelStore::CheckBlockCountLocked(uint64_t blocks, uint64_t evictable) const {
  const uint64_t limit = options_.max_blocks;
  const uint64_t held = blocks_.committed_blocks();
  if (limit == 0 || held - std::min(held, evictable) + blocks <= limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "a model of ", blocks, " new blocks would exceed max_master_blocks = ", limit, " (",
      options_.totals_withheld.empty()
          ? absl::StrCat(held, " held or being written")
          : absl::StrCat("the blocks held are not shown under ", options_.totals_withheld),
      "; each block is one of blockswapd's mappings, bounded by vm.max_map_count)",
      EvictableClause(std::min(held, evictable), "blocks", options_.totals_withheld)));
}

absl::Status ModelStore::FitsLocked(uint64_t bytes, uint64_t blocks, const Evictable& evictable,
                                    EvictionReason* short_of) const {
  *short_of = EvictionReason::kMaxPinnedBytes;
  BLOCKSWAP_RETURN_IF_ERROR(CheckBudget(bytes, evictable.bytes));
  if (options_.memory_budget != nullptr) {
    *short_of = EvictionReason::kMaxMemoryBytes;
    const uint64_t charged = bytes + blocks * kBlockOverheadBytes;
    const uint64_t freed = evictable.bytes + evictable.blocks * kBlockOverheadBytes;
    absl::Status fits = options_.memory_budget->CheckFits(
        charged - std::min(charged, freed),
        absl::StrCat("a model of ", bytes, " bytes in ", blocks, " blocks (", charged,
                     " with their overhead)"));
    if (!fits.ok()) {
      return absl::Status(
          fits.code(),
          absl::StrCat(fits.message(), EvictableClause(freed, "bytes", options_.totals_withheld)));
    }
  }
  *short_of = EvictionReason::kMaxMasterBlocks;
  BLOCKSWAP_RETURN_IF_ERROR(CheckBlockCountLocked(blocks, evictable.blocks));
  *short_of = EvictionReason::kTmpfs;
  return CheckFreeSpace(bytes, evictable.bytes);
}

absl::Status ModelStore::MakeRoomLocked(uint64_t bytes, uint64_t blocks, uid_t uid) {
  while (true) {
    EvictionReason short_of = EvictionReason::kTmpfs;
    absl::Status fits = FitsLocked(bytes, blocks, Evictable{}, &short_of);
    if (fits.ok()) return fits;
    const bool short_of_blocks = short_of == EvictionReason::kMaxMasterBlocks;
    // The unreferenced model of the uid that holds the most of what is
    // short, least recently used first among equals.
    const std::string* victim = nullptr;
    uint64_t heaviest = 0;
    uint64_t oldest = UINT64_MAX;
    for (const auto& [id, model] : models_) {
      if (References(model) != 0) continue;
      uint64_t weight = 0;
      if (auto charged = charged_uids_.find(id); charged != charged_uids_.end()) {
        for (uid_t owner : charged->second) {
          weight = std::max(weight,
                            short_of_blocks ? uid_holds_.blocks(owner) : uid_holds_.bytes(owner));
        }
      }
      auto use = last_use_.find(id);
      uint64_t tick = use == last_use_.end() ? 0 : use->second;
      if (victim == nullptr || weight > heaviest || (weight == heaviest && tick < oldest)) {
        victim = &id, heaviest = weight, oldest = tick;
      }
    }
    if (victim == nullptr) return fits;
    std::string id = *victim;
    EvictLocked(id, short_of,
                absl::StrCat("room for a model of ", bytes, " bytes in ", blocks,
                             " new blocks registered by uid ", uid));
  }
}

void ModelStore::EvictLocked(const std::string& id, EvictionReason reason, absl::string_view why) {
  auto it = models_.find(id);
  if (it == models_.end()) return;
  std::string owners;
  // The manifest first: without it a restarted daemon adopts nothing.
  files_->RemoveQuietly(absl::StrCat(id, kManifestSuffix));
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
  last_use_.erase(id);
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
