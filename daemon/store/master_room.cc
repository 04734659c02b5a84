#include "daemon/store/master_room.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/store/block_master.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

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

MasterRoom::MasterRoom(MasterRoomLimits limits, const MasterFiles* files)
    : limits_(std::move(limits)), files_(files) {}

std::string MasterRoom::FreeableClause(uint64_t freeable, absl::string_view what) const {
  if (freeable == 0 || !limits_.totals_withheld.empty()) return "";
  return absl::StrCat("; evicting every model no session holds would free only ", freeable, " ",
                      what);
}

absl::Status MasterRoom::Fits(uint64_t bytes, uint64_t blocks, const BlockTotals& committed,
                              const BlockTotals& freeable, EvictionReason* short_of) const {
  *short_of = EvictionReason::kMaxPinnedBytes;
  BLOCKSWAP_RETURN_IF_ERROR(CheckPinned(bytes, committed.bytes, freeable.bytes));
  *short_of = EvictionReason::kMaxMemoryBytes;
  BLOCKSWAP_RETURN_IF_ERROR(CheckMemory(bytes, blocks, freeable));
  *short_of = EvictionReason::kMaxMasterBlocks;
  BLOCKSWAP_RETURN_IF_ERROR(CheckBlockCount(blocks, committed.blocks, freeable.blocks));
  *short_of = EvictionReason::kTmpfs;
  return CheckFreeSpace(bytes, freeable.bytes);
}

absl::Status MasterRoom::CheckPinned(uint64_t bytes, uint64_t committed, uint64_t freeable) const {
  // Otherwise what max_pinned_bytes cannot take is staged.
  if (limits_.pinning != PinningPolicy::kAlways) return absl::OkStatus();
  // Registrations in progress count: their reservations are promises.
  const uint64_t kept = committed - std::min(committed, freeable);
  const uint64_t limit = limits_.max_pinned_bytes;
  if (limit != 0 && (bytes > limit || kept > limit - bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "model of ", bytes, " bytes would exceed --max-pinned-bytes=", limit, " (",
        limits_.totals_withheld.empty()
            ? absl::StrCat(committed, " already pinned")
            : absl::StrCat("what is pinned already is not shown under ", limits_.totals_withheld),
        ")", FreeableClause(std::min(committed, freeable), "bytes")));
  }
  return absl::OkStatus();
}

absl::Status MasterRoom::CheckMemory(uint64_t bytes, uint64_t blocks,
                                     const BlockTotals& freeable) const {
  if (limits_.memory_budget == nullptr) return absl::OkStatus();
  const uint64_t charged = bytes + blocks * kBlockOverheadBytes;
  const uint64_t freed = freeable.bytes + freeable.blocks * kBlockOverheadBytes;
  absl::Status fits =
      limits_.memory_budget->CheckFits(charged - std::min(charged, freed),
                                       absl::StrCat("a model of ", bytes, " bytes in ", blocks,
                                                    " blocks (", charged, " with their overhead)"));
  if (fits.ok()) return fits;
  return absl::Status(fits.code(), absl::StrCat(fits.message(), FreeableClause(freed, "bytes")));
}

absl::Status MasterRoom::CheckBlockCount(uint64_t blocks, uint64_t committed,
                                         uint64_t freeable) const {
  const uint64_t limit = limits_.max_blocks;
  if (limit == 0 || committed - std::min(committed, freeable) + blocks <= limit) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "a model of ", blocks, " new blocks would exceed max_master_blocks = ", limit, " (",
      limits_.totals_withheld.empty()
          ? absl::StrCat(committed, " held or being written")
          : absl::StrCat("the blocks held are not shown under ", limits_.totals_withheld),
      "; each block is one of blockswapd's mappings, bounded by vm.max_map_count)",
      FreeableClause(std::min(committed, freeable), "blocks")));
}

absl::Status MasterRoom::CheckFreeSpace(uint64_t bytes, uint64_t freeable) const {
  BLOCKSWAP_ASSIGN_OR_RETURN(const uint64_t free_bytes, files_->FreeBytes());
  if (free_bytes + freeable < bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("model of ", bytes, " bytes does not fit: ", files_->path(), " has ",
                     free_bytes, " bytes free", FreeableClause(freeable, "more")));
  }
  return absl::OkStatus();
}

absl::StatusOr<Reservation> MasterRoom::Charge(uint64_t bytes, absl::string_view name) const {
  if (limits_.memory_budget == nullptr) return Reservation();
  return limits_.memory_budget->Reserve(
      MemoryUse::kMasters, bytes + kBlockOverheadBytes,
      absl::StrCat("a block master of model '", name, "' (", bytes, " bytes + ",
                   kBlockOverheadBytes, " of descriptor, mapping and inode)"));
}

}  // namespace blockswap::daemon
