// Per-client quotas: how much of the daemon one session may hold — rings,
// device bytes of its rings, and host bytes of its staging areas (uploads
// between BeginUpload and CommitUpload). 0 means unlimited. The limits may
// change while the daemon runs (SIGHUP); a change applies to the next
// request, it takes nothing away from a session.
#ifndef BLOCKSWAP_DAEMON_SESSION_QUOTA_H_
#define BLOCKSWAP_DAEMON_SESSION_QUOTA_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace blockswap::daemon {

struct ClientQuotas {
  uint32_t max_rings = 0;          // max_rings_per_client
  uint64_t max_device_bytes = 0;   // max_device_bytes_per_client
  uint64_t max_staging_bytes = 0;  // max_staging_bytes_per_client
};

// What a session holds now.
struct ClientUsage {
  uint32_t rings = 0;
  uint64_t device_bytes = 0;
  uint64_t staging_bytes = 0;
};

// OK, or RESOURCE_EXHAUSTED naming the quota (its config key), the limit and
// what the session holds: "session 3 would hold 3 rings, over the quota
// max_rings_per_client = 2".
absl::Status CheckNewRing(const ClientQuotas& quotas, uint64_t session_id, const ClientUsage& usage,
                          uint64_t ring_bytes);
absl::Status CheckNewUpload(const ClientQuotas& quotas, uint64_t session_id,
                            const ClientUsage& usage, uint64_t staging_bytes);

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
