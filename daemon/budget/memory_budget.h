// MemoryBudget: the node-wide budget max_memory_bytes — every byte of host
// memory the daemon reserves on anyone's behalf: the masters, the staging
// areas of uploads in progress and, on the host backend, the rings' memory.
// Each is charged here before the daemon creates it, so a client asking for
// more than is left gets RESOURCE_EXHAUSTED instead of the daemon being
// OOM-killed for it. (max_pinned_bytes, the masters that are pinned, is the
// model store's own limit and is checked besides this one.)
//
// Not charged: the daemon's own working memory, the per-ring control blocks
// and events (a few KiB each; the ring count quotas bound them), and device
// memory, which the device workers check against the device's free memory.
#ifndef BLOCKSWAP_DAEMON_BUDGET_MEMORY_BUDGET_H_
#define BLOCKSWAP_DAEMON_BUDGET_MEMORY_BUDGET_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/budget/ledger.h"

namespace blockswap::daemon {

// kStaging: the staging areas of uploads; kCopyStaging: the device workers'
// pinned buffers that staged copies go through (shared/copy/staging_pool.h).
enum class MemoryUse { kMasters, kStaging, kRings, kCopyStaging };
inline constexpr int kMemoryUses = 4;
absl::string_view MemoryUseName(MemoryUse use);

// Thread-safe; reservations may outlive it.
class MemoryBudget {
 public:
  // 0: unlimited (the uses are still counted). `totals_withheld` non-empty
  // (the setting that asks it, "model_access = registrant-group"): a refusal
  // names the limit and what was asked, never what is held, which moves
  // with other users' models and rings.
  explicit MemoryBudget(uint64_t max_memory_bytes, std::string totals_withheld = {});

  // Charges `bytes` of `use` for `what` ("a ring of 64 x 1048576 bytes for
  // pid 42"). RESOURCE_EXHAUSTED naming max_memory_bytes, what is held (by
  // use) and what was asked when it does not fit; nothing is charged then.
  absl::StatusOr<Reservation> Reserve(MemoryUse use, uint64_t bytes, absl::string_view what);
  // Reserve's answer without charging (advisory: for the store's eviction
  // loop, which makes room before it reserves).
  absl::Status CheckFits(uint64_t bytes, absl::string_view what) const;

  uint64_t limit() const { return limit_; }
  uint64_t used() const { return total_.used(); }
  uint64_t used(MemoryUse use) const { return by_use_[static_cast<int>(use)].used(); }

 private:
  absl::Status Refused(const absl::Status& refusal, uint64_t bytes, absl::string_view what) const;

  const uint64_t limit_;
  const std::string totals_withheld_;
  Ledger total_;
  Ledger by_use_[kMemoryUses];
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_BUDGET_MEMORY_BUDGET_H_
