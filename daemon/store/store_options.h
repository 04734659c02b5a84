// What a ModelStore is configured with, and what it counts.
#ifndef BLOCKSWAP_DAEMON_STORE_STORE_OPTIONS_H_
#define BLOCKSWAP_DAEMON_STORE_STORE_OPTIONS_H_

#include <array>
#include <cstdint>
#include <string>

#include "daemon/budget/memory_budget.h"
#include "daemon/store/master_pinning.h"
#include "daemon/store/master_room.h"
#include "daemon/store/uid_holds.h"

namespace blockswap::daemon {

struct ModelStoreOptions {
  std::string directory = "/dev/shm/blockswap";
  // Bytes of block files held pinned; 0: no limit but the device's. Under
  // "always" every master is pinned, so it limits the masters; otherwise the
  // masters beyond it are staged.
  uint64_t max_pinned_bytes = 0;
  PinningPolicy pinning = PinningPolicy::kAlways;
  // The node's max_memory_bytes, charged for every master (nullptr: only
  // max_pinned_bytes limits them). Must outlive the store.
  MemoryBudget* memory_budget = nullptr;
  // Distinct blocks the store may hold (each is one mapping of the daemon's;
  // max_master_blocks); 0: no limit.
  uint64_t max_blocks = 0;
  // What the models of one uid may hold (max_master_blocks_per_uid,
  // max_master_bytes_per_uid).
  UidMasterLimits uid_limits = {};
  // Non-empty (the setting that asks it, "model_access = registrant-group"):
  // a capacity refusal names the limit and what was asked, never what the
  // store holds already, which moves with other users' models.
  std::string totals_withheld = {};
};

struct ModelStoreStats {
  uint64_t adopted = 0;  // sealed models taken over at Open
  uint64_t removed = 0;  // other directory entries removed at Open
  uint64_t copies = 0;   // registrations that copied content into a master
  uint64_t evicted = 0;  // models removed by Evict or to make room
  // Of `evicted`, by EvictionReason.
  std::array<uint64_t, kEvictionReasons> evicted_by = {};
  uint64_t kept_unknown = 0;  // manifests of a newer format left in place, not adopted
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_STORE_OPTIONS_H_
