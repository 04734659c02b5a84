#include "daemon/session/quota.h"

#include "absl/strings/str_cat.h"

namespace blockswap::daemon {

absl::Status CheckNewRing(const ClientQuotas& quotas, uint64_t session_id, const ClientUsage& usage,
                          uint64_t ring_bytes) {
  if (quotas.max_rings != 0 && usage.rings + 1 > quotas.max_rings) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session ", session_id, " would hold ", usage.rings + 1,
                     " rings, over the quota max_rings_per_client = ", quotas.max_rings));
  }
  if (quotas.max_device_bytes != 0 && usage.device_bytes + ring_bytes > quotas.max_device_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "session ", session_id, " would hold ", usage.device_bytes + ring_bytes,
        " bytes of ring memory (", usage.device_bytes, " held + ", ring_bytes,
        " asked), over the quota max_device_bytes_per_client = ", quotas.max_device_bytes));
  }
  return absl::OkStatus();
}

absl::Status CheckNewUpload(const ClientQuotas& quotas, uint64_t session_id,
                            const ClientUsage& usage, uint64_t staging_bytes) {
  if (quotas.max_staging_bytes != 0 &&
      usage.staging_bytes + staging_bytes > quotas.max_staging_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "session ", session_id, " would hold ", usage.staging_bytes + staging_bytes,
        " bytes of staging memory (", usage.staging_bytes, " held + ", staging_bytes,
        " asked), over the quota max_staging_bytes_per_client = ", quotas.max_staging_bytes));
  }
  return absl::OkStatus();
}

}  // namespace blockswap::daemon
