// Room for masters: whether a model's blocks fit every limit the node puts
// on them (max_pinned_bytes under "always", max_memory_bytes with each
// block's overhead, max_master_blocks, the tmpfs's free space), counting as
// room what evicting idle models would free, and in what order the limits
// are checked, so that a refusal names the first that is short.
#ifndef BLOCKSWAP_DAEMON_STORE_MASTER_ROOM_H_
#define BLOCKSWAP_DAEMON_STORE_MASTER_ROOM_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/budget/memory_budget.h"
#include "daemon/store/block_table.h"
#include "daemon/store/master_files.h"
#include "daemon/store/master_pinning.h"

namespace blockswap::daemon {

// Why a model was evicted: an operator's Evict, or room made for a
// registration that will commit, named by the limit that was short.
enum class EvictionReason { kOperator, kMaxPinnedBytes, kMaxMemoryBytes, kMaxMasterBlocks, kTmpfs };
inline constexpr int kEvictionReasons = 5;
// "operator", "max_pinned_bytes", "max_memory_bytes", "max_master_blocks",
// "tmpfs": the label of evictions_total and the reason in the log.
absl::string_view EvictionReasonName(EvictionReason reason);

struct MasterRoomLimits {
  PinningPolicy pinning = PinningPolicy::kAlways;
  uint64_t max_pinned_bytes = 0;          // 0: no limit but the device's
  MemoryBudget* memory_budget = nullptr;  // nullptr: none
  uint64_t max_blocks = 0;                // 0: no limit
  // Non-empty: a refusal never shows what is held already (it moves with
  // other users' models), naming this setting instead.
  std::string totals_withheld = {};
};

// Thread-safe (it reads only its limits, the budget and the tmpfs).
class MasterRoom {
 public:
  // `limits.memory_budget` and `files` must outlive it.
  MasterRoom(MasterRoomLimits limits, const MasterFiles* files);

  // Whether `bytes` more in `blocks` more blocks fit beside what is held or
  // reserved (`committed`) once `freeable` is freed: RESOURCE_EXHAUSTED
  // naming the first limit that is short otherwise, that limit in
  // `short_of`.
  absl::Status Fits(uint64_t bytes, uint64_t blocks, const BlockTotals& committed,
                    const BlockTotals& freeable, EvictionReason* short_of) const;
  // Whether the tmpfs has `bytes` free, or will once `freeable` bytes go.
  absl::Status CheckFreeSpace(uint64_t bytes, uint64_t freeable = 0) const;
  // The node budget's charge for a master of `bytes`, with its
  // kBlockOverheadBytes (empty without a budget). `name`: the model's.
  absl::StatusOr<Reservation> Charge(uint64_t bytes, absl::string_view name) const;

 private:
  absl::Status CheckPinned(uint64_t bytes, uint64_t committed, uint64_t freeable) const;
  absl::Status CheckMemory(uint64_t bytes, uint64_t blocks, const BlockTotals& freeable) const;
  absl::Status CheckBlockCount(uint64_t blocks, uint64_t committed, uint64_t freeable) const;
  // The clause a refusal adds when evicting would free some of what it
  // counts; empty when totals are withheld (it moves with others' models).
  std::string FreeableClause(uint64_t freeable, absl::string_view what) const;

  const MasterRoomLimits limits_;
  const MasterFiles* const files_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_MASTER_ROOM_H_
