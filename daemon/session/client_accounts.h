// ClientAccounts: what each client process and each uid holds of the
// daemon, charged before the daemon reserves it and checked against the
// quotas (quota.h). A charge is a Reservation held by the thing itself — the
// session, the upload, the ring (in its device worker, until the ring is
// freed), the parked file offer — so nothing is counted after it is gone.
//
// Processes are keyed by pid: a charge outliving its process (a retired ring
// being freed) keeps counting for that pid until it is freed, which takes at
// most the copies still in flight once the process has died.
#ifndef BLOCKSWAP_DAEMON_SESSION_CLIENT_ACCOUNTS_H_
#define BLOCKSWAP_DAEMON_SESSION_CLIENT_ACCOUNTS_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/budget/ledger.h"
#include "daemon/session/quota.h"

namespace blockswap::daemon {

// Thread-safe; reservations may outlive it.
class ClientAccounts {
 public:
  // Charges `amounts` to process `pid` and to `uid`, all or nothing:
  // RESOURCE_EXHAUSTED naming the first quota it would break ("process 42
  // (uid 1000) would hold 65 rings (64 held + 1 asked), over
  // max_rings_per_client = 64").
  absl::StatusOr<Reservation> Reserve(uid_t uid, pid_t pid, const ClientAmounts& amounts,
                                      const ClientQuotas& quotas);
  ClientAmounts HeldByProcess(pid_t pid) const;
  ClientAmounts HeldByUid(uid_t uid) const;

 private:
  // One holder's ledgers, one per QuotaKinds() entry.
  struct Account {
    explicit Account(const std::string& holder);
    std::vector<Ledger> ledgers;
    bool Idle() const;
    ClientAmounts Held() const;
  };
  // Accounts that hold nothing are dropped now and then (mu_ held), so that
  // the maps do not grow with every pid ever seen.
  void SweepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<pid_t, std::unique_ptr<Account>> processes_ ABSL_GUARDED_BY(mu_);
  std::map<uid_t, std::unique_ptr<Account>> uids_ ABSL_GUARDED_BY(mu_);
  size_t sweep_at_ ABSL_GUARDED_BY(mu_) = 64;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SESSION_CLIENT_ACCOUNTS_H_
