// Per-client quotas: how much of the daemon one client process, and every
// process of one uid together, may hold — sessions, rings (a destroyed ring
// counts until the daemon has freed it), the bytes of their rings, the bytes
// of staging areas (uploads between BeginUpload and CommitUpload), file
// offers parked on side channels, and the daemon's descriptors all of those
// keep open (descriptor_model.h). Keyed by process and uid, never by
// session: a second session of the same process shares its process's quota.
// 0 means unlimited; kAutoLimit ("auto", the _per_uid keys of the kinds
// that have one) is resolved where it is used: max_descriptors_per_uid when
// the daemon starts, max_device_bytes_per_uid per device (DeviceWorker).
// The limits may change while the daemon runs (SIGHUP); a change applies to
// the next request, it takes nothing away from anyone. What is held is
// counted by ClientAccounts (client_accounts.h).
#ifndef BLOCKSWAP_DAEMON_SESSION_QUOTA_H_
#define BLOCKSWAP_DAEMON_SESSION_QUOTA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace blockswap::daemon {

// An amount of each quota'd thing: a limit, what an operation asks for, or
// what someone holds.
struct ClientAmounts {
  uint64_t sessions = 0;
  uint64_t rings = 0;
  uint64_t device_bytes = 0;  // ring memory
  uint64_t staging_bytes = 0;
  uint64_t file_offers = 0;
  uint64_t descriptors = 0;  // of the daemon's, kept open for the things above
};

struct ClientQuotas {
  ClientAmounts per_client;  // one client process: the *_per_client keys
  ClientAmounts per_uid;     // every process of one uid: the *_per_uid keys
};

// The defaults of a system service (deploy/blockswapd.toml says why).
ClientQuotas DefaultClientQuotas();

// One quota'd thing, as the config keys and the refusals name it:
// max_<name>_per_client, max_<name>_per_uid.
struct QuotaKind {
  absl::string_view name;  // "rings"
  absl::string_view unit;  // "rings", "bytes of ring memory"
  bool bytes;              // a byte count (the config accepts "1GiB")
  uint64_t ClientAmounts::*member;
  // Non-empty: max_<name>_per_uid may be "auto" (kAutoLimit), which this
  // says the meaning of.
  absl::string_view uid_auto;
};
const std::vector<QuotaKind>& QuotaKinds();
enum class QuotaScope { kClient, kUid };
std::string QuotaKey(const QuotaKind& kind, QuotaScope scope);
// A limit as the config writes it: "auto" for kAutoLimit, else the number.
std::string QuotaValueText(uint64_t limit);

// The quotas in force; thread-safe.
class QuotaPolicy {
 public:
  explicit QuotaPolicy(ClientQuotas quotas = {}) : quotas_(quotas) {}
  ClientQuotas Get() const {
    absl::MutexLock lock(&mu_);
    return quotas_;
  }
  void Set(const ClientQuotas& quotas) {
    absl::MutexLock lock(&mu_);
    quotas_ = quotas;
  }

 private:
  mutable absl::Mutex mu_;
  ClientQuotas quotas_ ABSL_GUARDED_BY(mu_);
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SESSION_QUOTA_H_
