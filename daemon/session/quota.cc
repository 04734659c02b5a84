#include "daemon/session/quota.h"

#include "absl/strings/str_cat.h"

namespace blockswap::daemon {

ClientQuotas DefaultClientQuotas() {
  ClientQuotas quotas;
  // A trainer attaches once per process (a few sessions at most, one per
  // library that embeds a client) and holds a ring or two per device.
  quotas.per_client = {.sessions = 16, .rings = 64, .file_offers = 256};
  // Every process of one uid: a node's worth of trainers of one user.
  quotas.per_uid = {.sessions = 128, .rings = 512, .file_offers = 1024};
  // Bytes stay unlimited per client by default: the node's max_memory_bytes
  // and the device reserve bound them, whatever the node's size.
  return quotas;
}

const std::vector<QuotaKind>& QuotaKinds() {
  static const std::vector<QuotaKind>* kinds = new std::vector<QuotaKind>{
      {"sessions", "sessions", false, &ClientAmounts::sessions},
      {"rings", "rings", false, &ClientAmounts::rings},
      {"device_bytes", "bytes of ring memory", true, &ClientAmounts::device_bytes},
      {"staging_bytes", "bytes of staging memory", true, &ClientAmounts::staging_bytes},
      {"file_offers", "parked file offers", false, &ClientAmounts::file_offers},
  };
  return *kinds;
}

std::string QuotaKey(const QuotaKind& kind, QuotaScope scope) {
  return absl::StrCat("max_", kind.name, scope == QuotaScope::kClient ? "_per_client" : "_per_uid");
}

}  // namespace blockswap::daemon
