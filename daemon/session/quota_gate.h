// QuotaGate: where every charge to a client meets its quotas. It holds the
// quotas in force (quota.h), what each process and uid holds
// (client_accounts.h), and the refusals: each is counted, and logged at most
// once per uid in a window (RefusalLog, with a summary of the rest), so that
// a client retrying in a loop cannot flood the journal.
#ifndef BLOCKSWAP_DAEMON_SESSION_QUOTA_GATE_H_
#define BLOCKSWAP_DAEMON_SESSION_QUOTA_GATE_H_

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/budget/ledger.h"
#include "daemon/runtime/refusal_log.h"
#include "daemon/session/client_accounts.h"
#include "daemon/session/peer.h"
#include "daemon/session/quota.h"

namespace blockswap::daemon {

// Thread-safe; reservations may outlive it.
class QuotaGate {
 public:
  // `log` receives the refusal lines (the daemon's info log by default).
  explicit QuotaGate(RefusalLog::Sink log = nullptr);

  // Charges `amounts` to the peer's process and uid (ClientAccounts::Reserve)
  // under the quotas in force now.
  absl::StatusOr<Reservation> Charge(const Peer& peer, const ClientAmounts& amounts);

  // Set may be called at any time (SIGHUP); it applies to the next charge.
  QuotaPolicy& quotas() { return quotas_; }
  const QuotaPolicy& quotas() const { return quotas_; }
  const ClientAccounts& accounts() const { return accounts_; }
  // Charges refused because a quota was full.
  uint64_t refusals() const { return refusals_.load(std::memory_order_relaxed); }

 private:
  QuotaPolicy quotas_;
  ClientAccounts accounts_;
  std::atomic<uint64_t> refusals_{0};
  absl::Mutex log_mu_;
  RefusalLog log_ ABSL_GUARDED_BY(log_mu_);
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SESSION_QUOTA_GATE_H_
