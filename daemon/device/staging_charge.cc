#include "daemon/device/staging_charge.h"

#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

absl::StatusOr<Reservation> ChargeStagingPool(const Device& device, const StagingOptions& options,
                                              MemoryBudget* budget) {
  BLOCKSWAP_RETURN_IF_ERROR(CheckStagingOptions(device, options));
  if (budget == nullptr) return Reservation();
  return budget->Reserve(MemoryUse::kCopyStaging, options.buffer_bytes * options.buffers,
                         absl::StrCat("the staging buffers of ", device.info().uuid, " (",
                                      options.buffers, " x ", options.buffer_bytes, " bytes)"));
}

}  // namespace blockswap::daemon
