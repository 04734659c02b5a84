#include "daemon/session/client_accounts.h"

#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

ClientAccounts::Account::Account(const std::string& holder) {
  for (const QuotaKind& kind : QuotaKinds()) ledgers.emplace_back(holder, std::string(kind.unit));
}

bool ClientAccounts::Account::Idle() const {
  for (const Ledger& ledger : ledgers) {
    if (ledger.used() != 0) return false;
  }
  return true;
}

ClientAmounts ClientAccounts::Account::Held() const {
  ClientAmounts held;
  for (size_t k = 0; k < QuotaKinds().size(); ++k)
    held.*(QuotaKinds()[k].member) = ledgers[k].used();
  return held;
}

absl::StatusOr<Reservation> ClientAccounts::Reserve(uid_t uid, pid_t pid,
                                                    const ClientAmounts& amounts,
                                                    const ClientQuotas& quotas) {
  absl::MutexLock lock(&mu_);
  if (processes_.size() + uids_.size() >= sweep_at_) SweepLocked();
  std::unique_ptr<Account>& process = processes_[pid];
  if (process == nullptr) {
    process = std::make_unique<Account>(absl::StrCat("process ", pid, " (uid ", uid, ")"));
  }
  std::unique_ptr<Account>& user = uids_[uid];
  if (user == nullptr) user = std::make_unique<Account>(absl::StrCat("uid ", uid));
  Reservation reservation;  // returns what it took if a later charge fails
  for (size_t k = 0; k < QuotaKinds().size(); ++k) {
    const QuotaKind& kind = QuotaKinds()[k];
    const uint64_t amount = amounts.*kind.member;
    if (amount == 0) continue;
    const std::string client_key = QuotaKey(kind, QuotaScope::kClient);
    BLOCKSWAP_ASSIGN_OR_RETURN(
        Charge by_process,
        process->ledgers[k].Reserve(amount, {client_key, quotas.per_client.*kind.member}));
    reservation.Add(std::move(by_process));
    const std::string uid_key = QuotaKey(kind, QuotaScope::kUid);
    BLOCKSWAP_ASSIGN_OR_RETURN(
        Charge by_uid, user->ledgers[k].Reserve(amount, {uid_key, quotas.per_uid.*kind.member}));
    reservation.Add(std::move(by_uid));
  }
  return reservation;
}

void ClientAccounts::SweepLocked() {
  std::erase_if(processes_, [](const auto& entry) { return entry.second->Idle(); });
  std::erase_if(uids_, [](const auto& entry) { return entry.second->Idle(); });
  sweep_at_ = std::max<size_t>(64, 2 * (processes_.size() + uids_.size()));
}

ClientAmounts ClientAccounts::HeldByProcess(pid_t pid) const {
  absl::MutexLock lock(&mu_);
  auto it = processes_.find(pid);
  return it == processes_.end() ? ClientAmounts{} : it->second->Held();
}

ClientAmounts ClientAccounts::HeldByUid(uid_t uid) const {
  absl::MutexLock lock(&mu_);
  auto it = uids_.find(uid);
  return it == uids_.end() ? ClientAmounts{} : it->second->Held();
}

}  // namespace blockswap::daemon
