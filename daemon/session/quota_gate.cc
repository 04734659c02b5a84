#include "daemon/session/quota_gate.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/runtime/logging.h"

namespace blockswap::daemon {
namespace {

void LogInfo(absl::string_view line) { Log(LogLevel::kInfo, line); }

}  // namespace

QuotaGate::QuotaGate(RefusalLog::Sink log)
    : log_(log != nullptr ? std::move(log) : LogInfo, absl::Seconds(10), "request") {}

absl::StatusOr<Reservation> QuotaGate::Charge(const Peer& peer, const ClientAmounts& amounts) {
  absl::StatusOr<Reservation> charged =
      accounts_.Reserve(peer.uid, peer.pid, amounts, quotas_.Get());
  if (!charged.ok() && absl::IsResourceExhausted(charged.status())) {
    refusals_.fetch_add(1, std::memory_order_relaxed);
    absl::MutexLock lock(&log_mu_);
    log_.Refused(peer.uid,
                 absl::StrCat("quota refusal for pid ", peer.pid, " (uid ", peer.uid,
                              "): ", charged.status().message()),
                 absl::Now());
  }
  return charged;
}

}  // namespace blockswap::daemon
