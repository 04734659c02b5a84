#include "daemon/session/quota.h"

#include "absl/strings/str_cat.h"
#include "daemon/budget/master_limits.h"

namespace blockswap::daemon {

ClientQuotas DefaultClientQuotas() {
  ClientQuotas quotas;
  // A trainer attaches once per process (a few sessions at most, one per
  // library that embeds a client) and holds a ring or two per device.
  quotas.per_client = {.sessions = 16, .rings = 64, .file_offers = 256};
  // Every process of one uid: a node's worth of trainers of one user, and
  // shares of what each device holds for rings and of the daemon's
  // descriptors that leave every other uid room (deploy/blockswapd.toml).
  quotas.per_uid = {.sessions = 128,
                    .rings = 512,
                    .device_bytes = kAutoLimit,
                    .file_offers = 1024,
                    .descriptors = kAutoLimit};
  // Bytes stay unlimited per client by default: the node's max_memory_bytes
  // and the per-uid shares bound them, whatever the node's size.
  return quotas;
}

const std::vector<QuotaKind>& QuotaKinds() {
  static const std::vector<QuotaKind>* kinds = new std::vector<QuotaKind>{
      {"sessions", "sessions", false, &ClientAmounts::sessions, ""},
      {"rings", "rings", false, &ClientAmounts::rings, ""},
      {"device_bytes", "bytes of ring memory", true, &ClientAmounts::device_bytes,
       "half of what each device holds for rings (its memory less device_memory_reserve_bytes, "
       "on the host backend at most max_memory_bytes), per device"},
      {"staging_bytes", "bytes of staging memory", true, &ClientAmounts::staging_bytes, ""},
      {"file_offers", "parked file offers", false, &ClientAmounts::file_offers, ""},
      {"descriptors", "descriptors", false, &ClientAmounts::descriptors,
       "half of the descriptors RLIMIT_NOFILE leaves beyond the daemon's own and a reserve of "
       "1024, less what max_connections_per_uid connections hold"},
  };
  return *kinds;
}

std::string QuotaKey(const QuotaKind& kind, QuotaScope scope) {
  return absl::StrCat("max_", kind.name, scope == QuotaScope::kClient ? "_per_client" : "_per_uid");
}

std::string QuotaValueText(uint64_t limit) {
  return limit == kAutoLimit ? "\"auto\"" : absl::StrCat(limit);
}

}  // namespace blockswap::daemon
