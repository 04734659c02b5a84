// The node's charge for one device's staging buffers (shared/copy/staging_pool.h):
// MemoryUse::kCopyStaging of max_memory_bytes, taken when the device worker
// starts, whenever its pool is made, so that masters filling the budget
// later cannot leave the first staged load without its buffers.
#ifndef BLOCKSWAP_DAEMON_DEVICE_STAGING_CHARGE_H_
#define BLOCKSWAP_DAEMON_DEVICE_STAGING_CHARGE_H_

#include "absl/status/statusor.h"
#include "daemon/budget/ledger.h"
#include "daemon/budget/memory_budget.h"
#include "shared/backend/backend.h"
#include "shared/copy/staging_pool.h"

namespace blockswap::daemon {

// Checks `options` (INVALID_ARGUMENT naming the key that is 0) and reserves
// the pool's bytes from `budget` (RESOURCE_EXHAUSTED naming the pool when
// they do not fit max_memory_bytes; an empty reservation without a budget).
absl::StatusOr<Reservation> ChargeStagingPool(const Device& device, const StagingOptions& options,
                                              MemoryBudget* budget);

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_DEVICE_STAGING_CHARGE_H_
