// ModelStore's capacity: the limits a new model is checked against, and the
// eviction of unreferenced models that makes room.
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "daemon/budget/master_limits.h"
#include "daemon/store/model_store.h"
#include "daemon/store/model_store_internal.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

absl::Status ModelStore::CheckBudget(uint64_t bytes) const {
  // Otherwise what max_pinned_bytes cannot take is staged (Pin).
  if (options_.pinning != PinningPolicy::kAlways) return absl::OkStatus();
  // Registrations in progress count: their reservations are promises.
  uint64_t committed = block_bytes_ + reserved_bytes_;
  uint64_t limit = options_.max_pinned_bytes;
  if (limit != 0 && (bytes > limit || committed > limit - bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("model of ", bytes, " bytes would exceed --max-pinned-bytes=", limit, " (",
                     options_.totals_withheld.empty()
                         ? absl::StrCat(committed, " already pinned")
                         : absl::StrCat("what is pinned already is not shown under ",
                                        options_.totals_withheld),
                     ")"));
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

absl::Status ModelStore::CheckFreeSpace(uint64_t bytes) const {
  struct statvfs fs {};
  if (::fstatvfs(directory_fd_->get(), &fs) != 0) {
    return ErrnoStatus(errno, absl::StrCat("statvfs of ", options_.directory));
  }
  uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (free_bytes < bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("model of ", bytes,
                                                     " bytes does not fit: ", options_.directory,
                                                     " has ", free_bytes, " bytes free"));
  }
  return absl::OkStatus();
}

absl::Status ModelStore::CheckCapacity(uint64_t bytes, uint64_t blocks) {
  absl::MutexLock lock(&mu_);
  return MakeRoomLocked(bytes, blocks);
}

absl::Status ModelStore::CheckBlockCountLocked(uint64_t blocks) const {
  const uint64_t limit = options_.max_blocks;
  const uint64_t held = blocks_.size() + reserved_blocks_;
  if (limit == 0 || held + blocks <= limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "a model of ", blocks, " new blocks would exceed max_master_blocks = ", limit, " (",
      options_.totals_withheld.empty()
          ? absl::StrCat(held, " held or being written")
          : absl::StrCat("the blocks held are not shown under ", options_.totals_withheld),
      "; each block is one of blockswapd's mappings, bounded by vm.max_map_count)"));
}

absl::Status ModelStore::MakeRoomLocked(uint64_t bytes, uint64_t blocks) {
  while (true) {
    bool short_of_blocks = false;
    absl::Status fits = CheckBudget(bytes);
    if (fits.ok() && options_.memory_budget != nullptr) {
      const uint64_t charged = bytes + blocks * kBlockOverheadBytes;
      fits = options_.memory_budget->CheckFits(
          charged, absl::StrCat("a model of ", bytes, " bytes in ", blocks, " blocks (", charged,
                                " with their overhead)"));
    }
    if (fits.ok()) {
      fits = CheckBlockCountLocked(blocks);
      short_of_blocks = !fits.ok();
    }
    if (fits.ok()) fits = CheckFreeSpace(bytes);
    if (fits.ok()) return fits;
    // The unreferenced model of the uid that holds the most of what is
    // short, least recently used first among equals.
    const std::string* victim = nullptr;
    uint64_t heaviest = 0;
    uint64_t oldest = UINT64_MAX;
    for (const auto& [id, model] : models_) {
      if (References(model) != 0) continue;
      uint64_t weight = 0;
      if (auto charged = charged_uids_.find(id); charged != charged_uids_.end()) {
        for (uid_t uid : charged->second) {
          weight =
              std::max(weight, short_of_blocks ? uid_holds_.blocks(uid) : uid_holds_.bytes(uid));
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
    EvictLocked(id);
  }
}

void ModelStore::EvictLocked(const std::string& id) {
  auto it = models_.find(id);
  if (it == models_.end()) return;
  // The manifest first: without it a restarted daemon adopts nothing.
  RemoveQuietly(absl::StrCat(id, kManifestSuffix));
  if (auto charged = charged_uids_.find(id); charged != charged_uids_.end()) {
    const std::vector<BlockRef> refs = BlockRefs(it->second->blocks_);
    for (uid_t uid : charged->second) uid_holds_.Remove(uid, refs);
    charged_uids_.erase(charged);
  }
  // A block goes only with the last model that names it.
  for (const auto& block : DistinctBlocks(it->second->blocks_)) {
    ReleaseBlockLocked(block->id(), &HeldBlock::models);
  }
  ++stats_.evicted;
  last_use_.erase(id);
  models_.erase(it);  // unpins and unmaps what no other model holds
}

absl::Status ModelStore::Evict(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(id);
  if (it == models_.end()) return NoSuchModelError(id);
  if (uint64_t refs = References(it->second); refs != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("model ", it->first, " is still referenced ", refs,
                     " time(s) (open in sessions or loads in flight); it can be evicted once "
                     "no session holds it"));
  }
  EvictLocked(it->first);
  return absl::OkStatus();
}

void ModelStore::ReleaseReservation(uint64_t bytes, uint64_t blocks) {
  absl::MutexLock lock(&mu_);
  reserved_bytes_ -= bytes;
  reserved_blocks_ -= blocks;
}

}  // namespace blockswap::daemon
